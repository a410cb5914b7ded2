"""How often and how an evaluation runs (``algo.trainer.eval_*`` in the app); the record checks itself.

A record every side shares: the app builds it, ``spec.TrainingRun`` holds it, the evaluator reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol

from fastsac_async.exceptions import AsyncConfigError
from fastsac_core import InferencePolicy

__all__ = ["ClipRecorder", "EvalSettings"]


class ClipRecorder(Protocol):
    """Renders one episode of a policy into a video file (the app's renders gymnasium's MuJoCo offscreen).

    It must pickle: the evaluator worker receives it with the settings.
    """

    def __call__(
        self, policy: InferencePolicy, seed: int, out: Path, should_stop: Callable[[], bool]
    ) -> Path | None:
        """Record one episode of ``policy`` (reset with ``seed``) into ``out``; the file written.

        That is ``out``, or a file beside it in another format where ``out``'s cannot be written here
        (the app's: a GIF where no MP4 encoder is installed). None when ``should_stop()`` turned true
        first (then nothing is written).
        """
        ...


def _positive_or_none(value: Any, kind: type) -> bool:
    if value is None:
        return True
    number = isinstance(value, int | float) if kind is float else isinstance(value, int)
    return number and not isinstance(value, bool) and value > 0


_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "interval_s": (
        lambda v: _positive_or_none(v, float),
        "use a positive number of seconds, or null (both intervals null: no evaluation)",
    ),
    "interval": (
        lambda v: _positive_or_none(v, int),
        "use a positive number of iterations, or null (both intervals null: no evaluation)",
    ),
    "episodes": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "use at least 1"),
    "seed": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "use 0 or more"),
    "video_every": (
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
        "use 0 (no clips) or a positive number of evaluations",
    ),
    "video": (lambda v: v is None or callable(v), "use a ClipRecorder, or None"),
}
"""The value rule of each field: (accepts, the fix the error names)."""


@dataclass(frozen=True, kw_only=True)
class EvalSettings:
    """Periodic deterministic evaluation during training (one of the two intervals at least)."""

    interval_s: float | None = 60.0
    """Seconds of training between the starts of two evaluations (None: by iterations only)."""
    interval: int | None = None
    """Iterations (global steps) between two evaluations (None: by seconds only); with both set,
    whichever comes due first."""
    episodes: int = 10
    """Episodes per evaluation (each on its own env, run as one batch of at most 32 envs)."""
    seed: int = 0
    """Seed of the evaluation envs: every evaluation starts from the same initial states."""
    video_every: int = 0
    """Every ``video_every``-th evaluation of a launch, its first included, also records a clip of one
    episode with ``video`` (``RunLayout.eval_clip``); 0: no clips."""
    video: ClipRecorder | None = None
    """Records the clips (needed when ``video_every`` > 0)."""

    def __post_init__(self) -> None:
        """Check every field, and that an interval is set.

        Raises:
            AsyncConfigError: The first invalid field, with its name, the value seen and the fix.
        """
        for f in fields(self):
            accepts, fix = _RULES[f.name]
            value = getattr(self, f.name)
            if not accepts(value):
                setting = f"eval_{f.name}"  # the app's key under algo.trainer
                raise AsyncConfigError(
                    f"{setting}={value!r} is invalid: {fix}", setting=setting, value=value, fix=fix
                )
        if self.interval_s is None and self.interval is None:
            fix = "set eval_interval_s or eval_interval (or leave evaluation off: no EvalSettings)"
            raise AsyncConfigError(f"eval_interval_s=None is invalid: {fix}", setting="eval_interval_s",
                                   value=None, fix=fix)  # fmt: skip
        if self.video_every and self.video is None:
            fix = "give a ClipRecorder as video, or use 0 (no clips)"
            raise AsyncConfigError(f"eval_video_every={self.video_every} is invalid: {fix}",
                                   setting="eval_video_every", value=self.video_every, fix=fix)  # fmt: skip
