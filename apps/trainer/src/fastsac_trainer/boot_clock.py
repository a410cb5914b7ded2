"""Seconds from the launch of the trainer to each milestone of a run's start, so every run measures its own.

A trainer marks each milestone once (``workers running`` when the asynchronous workers are released,
``first update`` at the first report with an update behind it); the line goes to the app's log (the
console and ``logs/trainer.log``): ``start-up: first update 37.4 s after launch``. The launch is the
start of this process (a ``torchrun`` rank's own start), as the user counts it.
"""

from __future__ import annotations

import logging
import time

import psutil  # type: ignore[import-untyped]

__all__ = ["BootClock"]

_log = logging.getLogger(__name__)


class BootClock:
    """Logs, once each, how long after the launch a run reached its start-up milestones.

    Args:
        launched: Unix time of the launch; None is this process's start.
    """

    def __init__(self, launched: float | None = None) -> None:
        self.launched = psutil.Process().create_time() if launched is None else launched
        """Unix time the seconds count from."""
        self.marks: dict[str, float] = {}
        """Milestone -> seconds after the launch, in the order they were reached."""

    def mark(self, milestone: str) -> None:
        """Record ``milestone`` as reached now and log it; later calls for the same milestone do nothing."""
        if milestone in self.marks:
            return
        seconds = time.time() - self.launched
        self.marks[milestone] = seconds
        _log.info("start-up: %s %.1f s after launch", milestone, seconds)
