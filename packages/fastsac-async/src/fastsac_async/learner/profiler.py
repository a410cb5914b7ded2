"""One torch-profiler window inside a running learner's loop (``learner.loop.run_learner_loop``).

``FASTSAC_PROFILE_LEARNER=N`` (an environment variable of the trainer, inherited by its workers)
makes each learner profile N loop iterations once it has run ``PROFILE_AFTER_UPDATES`` updates (so
compilation and CUDA-graph capture are behind it), or once it has run U updates with ``N@U`` (a
window in the steady state: early on a learner still catches up the updates owed while it
compiled), updates counted from this launch (a resumed run's too), and write the operator table,
sorted by host time, into its log (``runs/<run>/logs/learner<rank>.log``). That is the learner's
host budget *in* a run, beside busy collectors, which a standalone benchmark cannot show. On a CUDA
learner the log also gets the table sorted by device time and the share of the window in which the
learner's own GPU work ran (kernels and copies: ``busy_fraction``). The profiler sees only this
process: the rest of the window the GPU was idle or ran other processes' kernels (the collectors'
inference, the evaluator).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastsac_async.exceptions import AsyncConfigError

if TYPE_CHECKING:
    from torch.autograd.profiler_util import EventList
    from torch.profiler import profile

    from fastsac_async.learner.loop import Learner

__all__ = [
    "PROFILE_AFTER_UPDATES",
    "PROFILE_ENV",
    "ProfileWindow",
    "busy_fraction",
    "profile_iterations",
    "profile_window",
    "profiled",
]

PROFILE_ENV = "FASTSAC_PROFILE_LEARNER"
"""Environment variable: ``N`` or ``N@U``, loop iterations to profile in each learner (after ``U``
updates of this launch; unset or 0: none)."""

PROFILE_AFTER_UPDATES = 200
"""Updates a learner runs in this launch before its profiling window opens (without ``@U``)."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProfileWindow:
    """The profiling window ``FASTSAC_PROFILE_LEARNER`` asks for."""

    iterations: int
    """Loop iterations to profile (0: none)."""
    after_updates: int
    """Updates a learner runs before the window opens."""


def profile_window(environ: Mapping[str, str] = os.environ) -> ProfileWindow:
    """The window ``FASTSAC_PROFILE_LEARNER`` (``N`` or ``N@U``) asks for; AsyncConfigError if invalid."""
    raw = environ.get(PROFILE_ENV, "").strip()
    if not raw:
        return ProfileWindow(0, PROFILE_AFTER_UPDATES)
    count, at, after = raw.partition("@")
    try:
        window = ProfileWindow(int(count), int(after) if at else PROFILE_AFTER_UPDATES)
    except ValueError:
        window = ProfileWindow(-1, -1)
    if window.iterations < 0 or window.after_updates < 0:
        raise AsyncConfigError(
            f"{PROFILE_ENV}={raw!r} is neither a number of learner iterations (N) nor N@U (N iterations"
            " once U updates ran); unset it or use e.g. 50, or 50@20000 for a window in the steady state"
        )
    return window


def profile_iterations(environ: Mapping[str, str] = os.environ) -> int:
    """The iterations ``FASTSAC_PROFILE_LEARNER`` asks for (0 when unset); AsyncConfigError if invalid."""
    return profile_window(environ).iterations


def busy_fraction(intervals: Iterable[tuple[float, float]], start: float, end: float) -> float:
    """Share of ``[start, end]`` covered by the union of ``intervals`` (overlaps counted once)."""
    if end <= start:
        return 0.0
    covered, reach = 0.0, start
    for lo, hi in sorted(intervals):
        lo, hi = max(lo, reach), min(hi, end)
        if hi > lo:
            covered += hi - lo
            reach = hi
    return covered / (end - start)


def _device_summary(prof: profile, averages: EventList) -> str:
    """The device-time table and the busy share of the learner's GPU work ('' without any)."""
    from torch.autograd import DeviceType  # type: ignore[attr-defined]

    events = list(prof.events())  # type: ignore[no-untyped-call]
    work = [e.time_range for e in events if e.device_type == DeviceType.CUDA]
    if not work:
        return ""
    start = min(e.time_range.start for e in events)
    end = max(e.time_range.end for e in events)
    busy = busy_fraction(((k.start, k.end) for k in work), start, end)
    table = averages.table(sort_by="self_device_time_total", row_limit=20)  # type: ignore[no-untyped-call]
    return (
        f"\nthe learner's kernels and copies ran in {100 * busy:.1f} % of the window's"
        f" {(end - start) / 1e3:.1f} ms (busy_fraction); by device time:\n{table}"
    )


def profiled(learner: Learner, iterations: int, name: str) -> bool:
    """Run ``iterations`` iterations under the profiler and log its table; False if the learner stopped."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if learner.agent.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    running, done, updates = True, 0, learner.updates
    with profile(activities=activities, acc_events=True) as prof:  # one cycle: no "clears events" warning
        while done < iterations and running:
            running = learner.run_iteration()
            done += 1
    averages = prof.key_averages()
    table = averages.table(sort_by="self_cpu_time_total", row_limit=30)
    _log.info(
        "%s: profile of %d loop iterations (%d updates), by host time:\n%s%s",
        name, done, learner.updates - updates, table, _device_summary(prof, averages),
    )  # fmt: skip
    return running
