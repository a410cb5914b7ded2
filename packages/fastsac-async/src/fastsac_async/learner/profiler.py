"""One torch-profiler window inside a running learner's loop (``learner.loop.run_learner_loop``).

``FASTSAC_PROFILE_LEARNER=N`` (an environment variable of the trainer, inherited by its workers)
makes each learner profile N loop iterations once it has run ``PROFILE_AFTER_UPDATES`` updates (so
compilation and CUDA-graph capture are behind it), and write the operator table, sorted by host time,
into its log (``runs/<run>/logs/learner<rank>.log``). That is the learner's host budget *in* a run,
beside busy collectors, which a standalone benchmark cannot show.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from fastsac_async.exceptions import AsyncConfigError

if TYPE_CHECKING:
    from fastsac_async.learner.loop import Learner

__all__ = ["PROFILE_AFTER_UPDATES", "PROFILE_ENV", "profile_iterations", "profiled"]

PROFILE_ENV = "FASTSAC_PROFILE_LEARNER"
"""Environment variable: loop iterations to profile in each learner (unset or 0: none)."""

PROFILE_AFTER_UPDATES = 200
"""Updates a learner runs before its profiling window opens."""

_log = logging.getLogger(__name__)


def profile_iterations(environ: Mapping[str, str] = os.environ) -> int:
    """The iterations ``FASTSAC_PROFILE_LEARNER`` asks for (0 when unset); AsyncConfigError if invalid."""
    raw = environ.get(PROFILE_ENV, "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise AsyncConfigError(
            f"{PROFILE_ENV}={raw!r} is not a number of learner iterations; unset it or use e.g. 50"
        )
    return value


def profiled(learner: Learner, iterations: int, name: str) -> bool:
    """Run ``iterations`` iterations under the profiler and log its table; False if the learner stopped."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if learner.agent.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    running, done, updates = True, 0, learner.updates
    with profile(activities=activities) as prof:
        while done < iterations and running:
            running = learner.run_iteration()
            done += 1
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)
    _log.info(
        "%s: profile of %d loop iterations (%d updates), by host time:\n%s",
        name, done, learner.updates - updates, table,
    )  # fmt: skip
    return running
