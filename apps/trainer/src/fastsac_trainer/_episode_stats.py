"""Returns and lengths of the most recent finished episodes (for ``rollout/*`` metrics)."""

from __future__ import annotations

from collections import deque

import numpy as np
import numpy.typing as npt

__all__ = ["EpisodeStats"]


class EpisodeStats:
    """A window over the last ``window`` finished episodes.

    Args:
        window: How many of the most recent episodes the means cover.
    """

    def __init__(self, window: int = 100) -> None:
        self._returns: deque[float] = deque(maxlen=window)
        self._lengths: deque[int] = deque(maxlen=window)
        self.total_episodes = 0
        """Episodes finished since creation."""

    def add(self, returns: npt.NDArray[np.floating], lengths: npt.NDArray[np.integer]) -> None:
        """Record the episodes that ended in one step (``StepResult.episode_returns/lengths``)."""
        if returns.size:
            self._returns.extend(returns.tolist())
            self._lengths.extend(lengths.tolist())
            self.total_episodes += int(returns.size)

    @property
    def mean_return(self) -> float | None:
        """Mean undiscounted return over the window; None before any episode ended."""
        return float(np.mean(self._returns)) if self._returns else None

    @property
    def mean_length(self) -> float | None:
        """Mean episode length over the window; None before any episode ended."""
        return float(np.mean(self._lengths)) if self._lengths else None
