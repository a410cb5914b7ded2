"""A run that stopped moving, said once: no env step and no update for a while.

A collector whose env step never returns (a simulator that hangs, a deadlocked user env) holds
everything in strict mode: the learner owes no update for steps that never come, the other
collectors wait at their lead, and the console has nothing new to print. The parent watches the
counters it already shares with the workers (every collector's steps, the learners' updates); when
none has moved for :data:`STALL_WARN_S` it says so once, and has every worker write its stacks to
its log (``STACK_DUMP_SIGNAL``), so the user sees where each one is. Something moving again ends
the stall; a later one is said again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

__all__ = ["STALL_WARN_S", "StallWatch"]

STALL_WARN_S = 120.0
"""Seconds without an env step or an update before the parent says the run stalled: well above a
first compile's wait, during which the collectors are held at their lead (wiki/benchmarks.md has
the GPU host's compile times)."""


class StallWatch:
    """Says when counters that should move have not, once per stall.

    Args:
        after_s: Seconds without a change before a stall is due.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(self, after_s: float = STALL_WARN_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._after_s = after_s
        self._clock = clock
        self._last: tuple[int, ...] | None = None
        self._since = clock()
        self._said = False

    def check(self, counters: Sequence[int]) -> float | None:
        """Feed the current counters; the seconds they have not moved when a stall is newly due, else None."""
        now, seen = self._clock(), tuple(counters)
        if seen != self._last:
            self._last, self._since, self._said = seen, now, False
            return None
        still = now - self._since
        if self._said or still < self._after_s:
            return None
        self._said = True
        return still
