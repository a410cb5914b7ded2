"""Bounded waiting with back-off, shared by every blocking call of the package."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

from torch import Tensor

__all__ = ["Backoff", "BlockingRingOps"]

_SPIN_ROUNDS = 64
"""Yields before the first sleep: a consumer a few microseconds behind is caught without sleeping."""
_FIRST_SLEEP_S = 20e-6
"""The first sleep after the yields; each later one doubles it."""
_MAX_SLEEP_S = 1e-3
"""Longest single sleep: bounds the added latency once the other side moves again."""


class Backoff:
    """Yield, then sleep with exponentially growing pauses, until a deadline or a stop request.

    Usage: ``while not ready(): if not backoff.wait(): give up``.
    """

    def __init__(self, timeout_s: float, should_stop: Callable[[], bool] | None = None) -> None:
        self._deadline = time.monotonic() + max(0.0, timeout_s)
        self._should_stop = should_stop
        self._rounds = 0
        self.stopped = False
        """Whether the last ``wait()`` returned False because ``should_stop()`` was true."""

    def wait(self) -> bool:
        """Pause once; False when the deadline passed or ``should_stop()`` is true (no pause then)."""
        if self._should_stop is not None and self._should_stop():
            self.stopped = True
            return False
        now = time.monotonic()
        if now >= self._deadline:
            return False
        self._rounds += 1
        if self._rounds <= _SPIN_ROUNDS:
            os.sched_yield()
        else:
            pause = min(_MAX_SLEEP_S, _FIRST_SLEEP_S * 2.0 ** min(16, self._rounds - _SPIN_ROUNDS - 1))
            time.sleep(min(pause, self._deadline - now))
        return True


class BlockingRingOps:
    """``push_blocking`` and ``read_span_blocking`` for any ring with ``push`` and ``read_span``.

    Both ring kinds inherit them, so the waiting policy lives in one place (:class:`Backoff`).
    """

    def push(self, fields: Mapping[str, Tensor]) -> bool:  # pragma: no cover - provided by the ring
        """Push one slot without waiting (the ring's own)."""
        raise NotImplementedError

    def read_span(self, max_slots: int) -> tuple[int, dict[str, Tensor]]:  # pragma: no cover
        """Views of the next contiguous unread run without waiting (the ring's own)."""
        raise NotImplementedError

    def push_blocking(
        self, fields: Mapping[str, Tensor], timeout_s: float, should_stop: Callable[[], bool] | None = None
    ) -> bool:
        """Push, waiting up to ``timeout_s`` for room; False on timeout or when ``should_stop()``."""
        backoff = Backoff(timeout_s, should_stop)
        while not self.push(fields):
            if not backoff.wait():
                return False
        return True

    def read_span_blocking(
        self, max_slots: int, timeout_s: float, should_stop: Callable[[], bool] | None = None
    ) -> tuple[int, dict[str, Tensor]]:
        """``read_span``, waiting up to ``timeout_s`` for data; ``(0, {})`` on timeout or stop."""
        backoff = Backoff(timeout_s, should_stop)
        while True:
            count, views = self.read_span(max_slots)
            if count or not backoff.wait():
                return count, views
