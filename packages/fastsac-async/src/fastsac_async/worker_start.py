"""What every worker starts with: the stop signals it ignores and its thread variables.

Importable without torch: the fork server starts with both too (Note [fork server] in
:mod:`fastsac_async.parent.fork_server`), before the trainer imports torch.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

__all__ = ["STACK_DUMP_SIGNAL", "STOP_SIGNALS", "stop_signals_blocked", "worker_environment"]

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
"""Signals a worker ignores: the parent turns them into a stop (Note [worker signals])."""
STACK_DUMP_SIGNAL = signal.SIGUSR2
"""Makes a worker write every thread's stack to its log and carry on (Note [worker signals])."""


def worker_environment(threads: int) -> dict[str, str]:
    """A worker's thread variables (OpenMP, BLAS, inductor's compile workers).

    The fork server starts with them for one thread (the OpenMP and BLAS libraries read them when torch
    loads them), and each worker sets its own (for what reads them later).
    """
    n = str(max(1, threads))
    return {
        "OMP_NUM_THREADS": n,
        "MKL_NUM_THREADS": n,
        "OPENBLAS_NUM_THREADS": n,
        "OMP_WAIT_POLICY": "PASSIVE",
        # Inductor's parallel compile workers are extra processes; keep compilation in-process (except
        # a pinned GPU learner's first update chunk: Note [compile on borrowed CPUs]).
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
    }


@contextlib.contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """Block :data:`STOP_SIGNALS` and :data:`STACK_DUMP_SIGNAL` in this thread (start workers inside).

    A child started inside inherits the mask, so none of them can kill it before
    :func:`~fastsac_async.worker_process.worker_process` ignores them (Note [worker signals] there).
    One arriving meanwhile for this process is delivered when the block ends.
    """
    blocked = {*STOP_SIGNALS, STACK_DUMP_SIGNAL}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
