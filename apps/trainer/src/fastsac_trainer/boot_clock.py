"""Seconds from the launch of the trainer to each milestone of a run's start, so every run measures its own.

A trainer marks each milestone once (``workers started`` when the first asynchronous worker is forked: what
comes before it is the trainer's own start and its wait for the fork server; ``workers running`` when
they are all released,
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

With ``FASTSAC_PROFILE_BOOT`` set (:data:`fastsac_async.PROFILE_BOOT_ENV`, which also
profiles every worker's start), the trainer's own start runs under cProfile from the start of its
training command or ``train()`` call (:func:`profile_launch`, before the fork server starts) to the
milestone its clock is given (``workers running``, or the synchronous trainer's ``first update``),
and the clock writes it to ``logs/trainer.boot.prof`` (``RunLayout.boot_profile``), marked
incomplete when the run ends before that milestone; a seed list profiles its first run, a script
each ``train()`` call, and a run refused before its clock drops it (:func:`stop_profile`).
"""

from __future__ import annotations

import cProfile
import logging
import sys
import time
from pathlib import Path

from fastsac_async import process_start_time, profile_boot, write_profile  # imports no torch

__all__ = ["BootClock", "launch_time", "next_launch", "profile_launch", "stop_profile"]

_log = logging.getLogger(__name__)

_launched: float | None = None
"""Unix time a clock counts from when none is given: None is this process's start."""


_profile: cProfile.Profile | None = None
"""The start-up profile of this process (:func:`profile_launch`), until a clock writes it."""


def profile_launch() -> None:
    """Profile this run's start from now when ``FASTSAC_PROFILE_BOOT`` asks and no profile runs.

    A run's clock writes it (the first run of a seed list, each ``train()`` call); a run that ends
    before it has a clock drops it (:func:`stop_profile`). Under another profiler (``python -m
    cProfile``), nothing is started: one line says so.
    """
    global _profile
    if _profile is not None or not profile_boot():
        return
    if sys.getprofile() is not None:
        _log.info("start-up profile not taken: another profiler runs in this process")
        return
    profile = cProfile.Profile()
    try:
        profile.enable()
    except ValueError as exc:  # Python 3.12+: another profiling tool holds the hook
        _log.info("start-up profile not taken: %s", exc)
        return
    _profile = profile


def stop_profile() -> None:
    """Drop a start-up profile no clock wrote (the run was refused, or ended, before its clock)."""
    global _profile
    profile, _profile = _profile, None
    if profile is not None:
        profile.disable()


def next_launch() -> None:
    """The next run of this process counts its start-up from now (a seed list's second run, say)."""
    global _launched
    _launched = time.time()


def launch_time() -> float:
    """Unix time of the current run's launch: this process's start, or the latest :func:`next_launch`."""
    return process_start_time() if _launched is None else _launched


class BootClock:
    """Logs, once each, how long after the launch a run reached its start-up milestones.

    Args:
        launched: Unix time of the launch; None is :func:`launch_time`.
        expected: The milestones the run will reach; the summary line comes once all are reached.
        profile: Where to write this process's start-up profile (:func:`profile_launch`), and the
            milestone that ends it; None: the profile, if one runs, is left to a later clock.
    """

    def __init__(
        self,
        launched: float | None = None,
        expected: tuple[str, ...] = (),
        profile: tuple[Path, str] | None = None,
    ) -> None:
        self.launched = launch_time() if launched is None else launched
        """Unix time the seconds count from."""
        self.marks: dict[str, float] = {}
        """Milestone -> seconds after the launch, in the order they were reached."""
        self._expected = expected
        self._summed = False
        self._profile = profile

    def mark(self, milestone: str) -> None:
        """Record ``milestone`` as reached now and log it; later calls for the same milestone do nothing."""
        if milestone in self.marks:
            return
        seconds = time.time() - self.launched
        self.marks[milestone] = seconds
        _log.info("start-up: %s %.1f s after launch", milestone, seconds)
        if self._profile is not None and milestone == self._profile[1]:
            self._write_profile("")
        if self._expected and all(m in self.marks for m in self._expected):
            self.finish()

    def finish(self) -> None:
        """Log the milestones reached as one summary line (once; nothing when fewer than two were reached).

        A start-up profile still running is written, marked incomplete (:meth:`close`).
        """
        self.close()
        if self._summed or len(self.marks) < 2:  # one milestone's line already says it all
            return
        self._summed = True
        reached = ", ".join(f"{milestone} {seconds:.1f} s" for milestone, seconds in self.marks.items())
        _log.info("start-up: %s after launch", reached)

    def close(self) -> None:
        """Write the start-up profile if it still runs (the run ended before its milestone): incomplete."""
        if self._profile is not None:
            self._write_profile(f" (incomplete: the run ended before {self._profile[1]})")

    def _write_profile(self, note: str) -> None:
        global _profile
        profile, _profile = _profile, None
        path = self._profile[0] if self._profile is not None else None
        self._profile = None
        if profile is not None and path is not None:
            write_profile(profile, path, "start-up profile", _log, note)
