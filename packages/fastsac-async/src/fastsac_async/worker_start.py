"""What a worker starts with: the stop signals it ignores, its thread variables, whether it profiles its boot.

Importable without torch: the fork server starts with the first two (Note [fork server] in
:mod:`fastsac_async.parent.fork_server`), and the trainer asks the third of its own start, before it
imports torch.
"""

from __future__ import annotations

import contextlib
import cProfile
import logging
import os
import signal
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

__all__ = [
    "PROFILE_BOOT_ENV",
    "STACK_DUMP_SIGNAL",
    "STOP_SIGNALS",
    "process_start_time",
    "profile_boot",
    "stop_signals_blocked",
    "worker_environment",
    "write_profile",
]

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
"""Signals a worker ignores: the parent turns them into a stop (Note [worker signals])."""
STACK_DUMP_SIGNAL = signal.SIGUSR2
"""Makes a worker write every thread's stack to its log and carry on (Note [worker signals])."""

PROFILE_BOOT_ENV = "FASTSAC_PROFILE_BOOT"
"""Environment variable: ``1`` (or ``true``, ``yes``, ``on``), every worker runs its start-up under
cProfile and writes it to ``RunLayout.boot_profile(worker)``: at its release, or, marked incomplete, when
its start-up ends otherwise (a failure, a stop, a boot timeout); the trainer's own process does the same
from its run's start to its workers' release, or a synchronous run's first update
(``logs/trainer.boot.prof``: the first run of a seed list, each ``train()`` call). ``python -m pstats``
reads them."""


def profile_boot(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``FASTSAC_PROFILE_BOOT`` asks for boot profiles."""
    return environ.get(PROFILE_BOOT_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def write_profile(
    profile: cProfile.Profile, path: Path, what: str, log: logging.Logger, note: str = ""
) -> None:
    """Stop ``profile`` and write it to ``path``; one line of ``log`` says where, or why it could not.

    A diagnostic: failing to write it never fails its process. ``what`` names it in the line
    (``collector0 boot profile``), ``note`` follows the path (`` (incomplete: ...)``).
    """
    profile.disable()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        profile.dump_stats(path)
    except OSError as exc:
        log.warning("%s not written to %s: %s", what, path, exc)
        return
    log.info("%s: %s%s (read it with python -m pstats)", what, path, note)


def process_start_time(pid: int | None = None) -> float:
    """Unix time at which process ``pid`` (None: this one) started, to the kernel's clock tick (10 ms).

    The process's age is read against the same clock as its start (``/proc/uptime`` and the start
    tick in ``/proc/<pid>/stat``, both since boot), and taken from now. ``psutil``'s ``create_time``
    adds that tick to ``/proc/stat``'s boot time, which the kernel gives in whole seconds: up to a
    second early, the same for every process of a boot. Without ``/proc``: ``psutil``'s.
    """
    try:
        stat = Path(f"/proc/{'self' if pid is None else pid}/stat").read_text()
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        import psutil  # type: ignore[import-untyped]

        created: float = psutil.Process(pid).create_time()
        return created


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
        # a pinned GPU learner's compile on its collectors' CPUs: Note [compile on borrowed CPUs]).
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
