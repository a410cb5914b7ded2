"""Lend a learner its collectors' CPUs while its update steps compile (first chunk, or in the background).

:func:`compile_cpus` says which CPUs a learner may borrow; :func:`borrowed_cpus` lends them to one
block (Note [compile on borrowed CPUs]).

# Note [compile on borrowed CPUs]
A learner's first update chunk compiles and captures its update steps: about a minute of inductor
work on a cold machine, most of it Triton kernel builds that parallelise over worker processes. A
pinned learner owns one or two CPUs, and every worker starts with ``TORCHINDUCTOR_COMPILE_THREADS=1``
(no pool of extra processes), so it compiles serially. Meanwhile its collectors have nothing to do:
the learner does not drain while it compiles, so their rings fill within a couple of seconds and
they wait. :func:`borrowed_cpus` widens the calling thread's CPU affinity to its collectors' CPUs
for that one chunk and lets inductor use that many compile workers. Whatever starts inside inherits
the wide set: the compile-worker processes, and threads such as the autograd engine's device
thread, where a backward is compiled at its first call. At the end the workers are shut down and
every thread of the process is put back on the caller's own CPUs, so nothing born in the window
keeps the collectors' CPUs. A cold compile of the Humanoid update on a learner's 2 CPUs takes
nearly twice as long as on 16 (``wiki/benchmarks.md``, "Cold start").

With ``compile_in_background`` the learner trains from its first chunk, and the window is instead
the compile thread's whole build (``FastSACAgent``'s ``compile_context``, ``beside_main``): the
thread, its compile workers and every other thread of the process run on the wide set (autograd's
device thread exists by then: the learner's own backward calls started it), the learner's main
thread stays on its CPUs. The collectors then keep stepping, but strict back-pressure holds them to
the interim steps' pace, so part of their CPUs' time is free.

Outside the window, a step graph captured after a few
warm-up calls (an actor updated every ``policy_frequency`` critic updates) may compile or capture a
little in the next chunk, and a shorter remainder chunk recompiles its batch preparation: both
serially, on the learner's own CPUs.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager

from fastsac_async.spec import EngineSpec

__all__ = ["MAX_COMPILE_WORKERS", "borrowed_cpus", "compile_cpus"]

_log = logging.getLogger(__name__)

MAX_COMPILE_WORKERS = 32
"""Inductor's own cap on its compile workers."""


def compile_cpus(spec: EngineSpec, rank: int) -> tuple[int, ...] | None:
    """CPUs learner ``rank`` compiles its first update chunk on: its own and its collectors'.

    None (compile on its own CPUs) unless the learner is pinned and compiles on a GPU (Note
    [compile on borrowed CPUs]).
    """
    place = spec.topology.learners[rank]
    if place.cpus is None or not place.device.startswith("cuda") or not spec.agent.compile:
        return None
    cpus = set(place.cpus)
    for collector in spec.topology.collectors_of(rank):
        cpus.update(collector.cpus or ())
    return tuple(sorted(cpus))


@contextmanager
def borrowed_cpus(cpus: Collection[int] | None, *, beside_main: bool = False) -> Iterator[int]:
    """Run the block on ``cpus`` (the calling thread) with that many inductor compile workers.

    Afterwards the compile workers are shut down, and the thread's affinity and inductor's worker
    count are what they were. A no-op (yields the thread's own CPU count) when ``cpus`` is None,
    holds no CPU beyond the thread's own, or the platform has no ``sched_setaffinity``.

    Args:
        cpus: The CPUs to borrow (the thread's own are added to them).
        beside_main: The caller is a thread beside the main one (a background compile): every other
            thread of the process but the main one borrows them too, such as autograd's device
            thread, which the main thread's backward calls started and where a compiled backward
            compiles at its first call.

    Yields:
        The number of CPUs the block runs on.
    """
    if cpus is None or not hasattr(os, "sched_setaffinity"):
        yield len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        return
    own = os.sched_getaffinity(0)
    wide = own | set(cpus)
    try:
        if wide != own:
            os.sched_setaffinity(0, wide)
            if beside_main:
                _pin_every_thread(wide, but=threading.main_thread().native_id)
    except OSError as error:  # an optimisation only: compile on the learner's own CPUs instead
        _log.warning(
            "cannot run the compile on CPUs %s (%s); it runs on %s", sorted(wide), error, sorted(own)
        )
        wide = own
    if wide == own:
        yield len(own)
        return
    import torch._inductor.async_compile as async_compile
    import torch._inductor.config as inductor_config

    threads_before = inductor_config.compile_threads
    start_before = inductor_config.worker_start_method
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
        _pin_every_thread(own)


def _pin_every_thread(cpus: set[int], but: int | None = None) -> None:
    """Every thread of this process but ``but`` (a native id) on ``cpus``."""
    for task in os.listdir("/proc/self/task"):
        if int(task) == but:
            continue
        try:
            os.sched_setaffinity(int(task), cpus)
        except ProcessLookupError:  # the thread ended meanwhile
            continue
