"""Seconds from the launch of the trainer to each milestone of a run's start, so every run measures its own.

A trainer marks each milestone once (``workers running`` when the asynchronous workers are released,
``first update`` at the first report with an update behind it, ``compiled switch`` at the first report
whose updates run the compiled steps: Note [Compile in the background] in
``fastsac_core._background_compile``); the line goes to the app's log (the console and
``logs/trainer.log``): ``start-up: first update 37.4 s after launch``. Once every milestone the trainer
expects is reached, or at ``finish`` (the end of the run), one line sums them up: ``start-up: workers
running 17.6 s, first update 18.3 s, compiled switch 52.0 s after launch``; a run that reached one
milestone only has no summary (it would repeat that milestone's line). The launch is the start of
this process (a ``torchrun`` rank's own start), as the user counts it; for the second and later runs
of a seed list (``seed=1,2,3``, one process) and for each ``train()`` call, the start of that run
(:func:`next_launch`). :func:`launch_time` is that moment, the one zero of a run's seconds: the
start-up lines count from it, and the run's TensorBoard config events carry it (``trainer plot``
counts its wall-clock axis from it).
"""

from __future__ import annotations

import logging
import time

import psutil  # type: ignore[import-untyped]

__all__ = ["BootClock", "launch_time", "next_launch"]

_log = logging.getLogger(__name__)

_launched: float | None = None
"""Unix time a clock counts from when none is given: None is this process's start."""


def next_launch() -> None:
    """The next run of this process counts its start-up from now (a seed list's second run, say)."""
    global _launched
    _launched = time.time()


def launch_time() -> float:
    """Unix time of the current run's launch: this process's start, or the latest :func:`next_launch`."""
    return psutil.Process().create_time() if _launched is None else _launched


class BootClock:
    """Logs, once each, how long after the launch a run reached its start-up milestones.

    Args:
        launched: Unix time of the launch; None is :func:`launch_time`.
        expected: The milestones the run will reach; the summary line comes once all are reached.
    """

    def __init__(self, launched: float | None = None, expected: tuple[str, ...] = ()) -> None:
        self.launched = launch_time() if launched is None else launched
        """Unix time the seconds count from."""
        self.marks: dict[str, float] = {}
        """Milestone -> seconds after the launch, in the order they were reached."""
        self._expected = expected
        self._summed = False

    def mark(self, milestone: str) -> None:
        """Record ``milestone`` as reached now and log it; later calls for the same milestone do nothing."""
        if milestone in self.marks:
            return
        seconds = time.time() - self.launched
        self.marks[milestone] = seconds
        _log.info("start-up: %s %.1f s after launch", milestone, seconds)
        if self._expected and all(m in self.marks for m in self._expected):
            self.finish()

    def finish(self) -> None:
        """Log the milestones reached as one summary line (once; nothing when fewer than two were reached)."""
        if self._summed or len(self.marks) < 2:  # one milestone's line already says it all
            return
        self._summed = True
        reached = ", ".join(f"{milestone} {seconds:.1f} s" for milestone, seconds in self.marks.items())
        _log.info("start-up: %s after launch", reached)
