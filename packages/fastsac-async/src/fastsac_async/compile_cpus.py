"""Lend a learner more CPUs while its first update chunk compiles (Note [compile on borrowed CPUs]).

# Note [compile on borrowed CPUs]
A learner's first update chunk compiles and captures its update steps: about a minute of inductor
work on a cold machine, most of it Triton kernel builds that parallelise over worker processes. A
pinned learner owns one or two CPUs, and every worker starts with ``TORCHINDUCTOR_COMPILE_THREADS=1``
(no pool of extra processes), so it compiles serially. Meanwhile its collectors have nothing to do:
the learner does not drain while it compiles, so their rings fill within a couple of seconds and
they wait. :func:`borrowed_cpus` widens the learner thread's CPU affinity to its collectors' CPUs
for that one chunk and lets inductor use that many compile workers (they are spawned from this
thread, so they inherit the widened affinity), then shuts the workers down and restores both. On
the 2×H200 machine a cold compile of the Humanoid update took 60.7 s on 2 CPUs against 35.3 s on 16
(``wiki/benchmarks.md``, session 6).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Iterator
from contextlib import contextmanager

__all__ = ["MAX_COMPILE_WORKERS", "borrowed_cpus"]

_log = logging.getLogger(__name__)

MAX_COMPILE_WORKERS = 32
"""Inductor's own cap on its compile workers."""


@contextmanager
def borrowed_cpus(cpus: Collection[int] | None) -> Iterator[int]:
    """Run the block on ``cpus`` (the calling thread) with that many inductor compile workers.

    Afterwards the compile workers are shut down, and the thread's affinity and inductor's worker
    count are what they were. A no-op (yields the thread's own CPU count) when ``cpus`` is None,
    holds no CPU beyond the thread's own, or the platform has no ``sched_setaffinity``.

    Args:
        cpus: The CPUs to borrow (the thread's own are added to them).

    Yields:
        The number of CPUs the block runs on.
    """
    if cpus is None or not hasattr(os, "sched_setaffinity"):
        yield len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        return
    own = os.sched_getaffinity(0)
    wide = own | set(cpus)
    if wide == own:
        yield len(own)
        return
    import torch._inductor.async_compile as async_compile
    import torch._inductor.config as inductor_config

    threads_before = inductor_config.compile_threads
    start_before = inductor_config.worker_start_method
    os.sched_setaffinity(0, wide)
    inductor_config.compile_threads = min(MAX_COMPILE_WORKERS, len(wide))
    # A daemonic process (every engine worker) may not fork a pool; a subprocess sidecar may.
    inductor_config.worker_start_method = "subprocess"
    try:
        yield len(wide)
    finally:
        try:
            async_compile.shutdown_compile_workers()
        except Exception:  # a failed shutdown must not hide the block's own error or outcome
            _log.exception("shutting down inductor's compile workers failed")
        inductor_config.compile_threads = threads_before
        inductor_config.worker_start_method = start_before
        os.sched_setaffinity(0, own)
