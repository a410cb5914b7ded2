"""How often and how an evaluation runs (``algo.trainer.eval_*`` in the app); the record checks itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from fastsac_async.exceptions import AsyncConfigError

__all__ = ["EvalSettings"]


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
