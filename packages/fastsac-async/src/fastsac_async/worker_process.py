"""What every worker process does first, and how its end is recorded.

:func:`worker_process` wraps the body of a worker entry point. In order, it:

1. ties the worker's life to the run's parent: ``PR_SET_PDEATHSIG(SIGKILL)`` through ``prctl`` (the
   signal comes when the process that forked the worker dies: the fork server, which exits with the
   parent; Note [fork server] in :mod:`fastsac_async.parent.fork_server`), then a check that the
   parent still lives (it may have died before the call; the signal would never come), then a daemon
   watchdog thread that polls both (covers non-Linux and a parent thread that exits while the
   process lives: PDEATHSIG follows the creating *thread*);
2. ignores :data:`STOP_SIGNALS` (the parent owns shutdown: it turns them into the shared stop
   flag), and writes every thread's stack to its log on :data:`STACK_DUMP_SIGNAL`
   (Note [worker signals]);
3. redirects fd 1 and 2 and ``logging`` to its log, ``RunLayout.log(worker)``;
4. sets its thread variables (:func:`worker_environment`) and torch's thread count (the fork
   server loaded torch's OpenMP and BLAS libraries with one thread);
5. on an uncaught exception, writes the full traceback to ``RunLayout.error_log(worker)``
   and exits with code 1. The file's first line names the exception (Note [error log header]).

# Note [error log header]
A worker's error log starts with one line, ``<worker> (pid <pid>) failed: <exception line>``, the
exception line being :func:`exception_line` (``ValueError: bad action``), then the traceback. An
exception of an env's own code (``fastsac_core.EnvCallError``) is marked in the header itself:
``<worker> (pid <pid>) failed in its env: <line>``, the line being the error's own, which names the
env's exception (``Pendulum-v1's step() raised ValueError: bad action (raised at myenv.py:49 in
step)``). The parent reads the line back with the marker (:func:`recorded_exception`: a
:class:`RecordedException`) once the worker has exited, to name the error on the console; the marker,
never the line's wording, tells it whether "raised" is already said
(:class:`~fastsac_async.exceptions.WorkerFailed`'s ``in_env``). The file,
not a message on a queue, carries it: it is written synchronously before the worker unwinds
(:func:`record_failure`), by every kind of worker, also when its teardown is cut short or its stats
queue is full, and it is the file the console line points to, so the two cannot disagree. A worker
killed by a signal writes none: the parent names the signal.

# Note [worker signals]
A terminal and a job manager signal every process of a job, not only the one they started: Ctrl+C
(SIGINT) and a closed terminal (SIGHUP) reach the whole foreground process group, systemd's
``KillMode=control-group`` and SLURM (time limit, ``scancel``, ``--signal=USR1@...``) signal every
process of the job. A worker that died of one of them would turn a clean stop into a worker
failure, so every worker ignores :data:`STOP_SIGNALS` and only the parent acts on them (a clean
stop through the stop flag, or a stop at once). The parent starts the fork server with these
signals blocked (:func:`stop_signals_blocked`): the server inherits the mask through ``exec`` and
keeps it, and every worker inherits it through ``fork``, so none of them can kill the server or a
worker before :func:`worker_process` ignores them; it then unblocks them (a pending one is
discarded). :data:`STACK_DUMP_SIGNAL` is the one the parent sends
to a worker that outlived the shutdown's grace, just before SIGKILL: ``faulthandler`` writes every
thread's stack to the worker's log and the worker carries on.
"""

from __future__ import annotations

import contextlib
import cProfile
import ctypes
import faulthandler
import functools
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from fastsac_async.control import Control
from fastsac_async.parent.janitor import pid_alive
from fastsac_async.run_layout import RunLayout
from fastsac_async.worker_start import (
    STACK_DUMP_SIGNAL,
    STOP_SIGNALS,
    process_start_time,
    profile_boot,
    worker_environment,
    write_profile,
)
from fastsac_core import EnvCallError
from numa_bind import bind_current_process
from shm_transport import HandshakeAborted

__all__ = [
    "BootTimeline",
    "RecordedException",
    "bind",
    "collector_name",
    "evaluator_name",
    "exception_line",
    "learner_name",
    "record_failure",
    "recorded_exception",
    "reporting_failure",
    "seed",
    "worker_boot",
    "worker_process",
]

_PR_SET_PDEATHSIG = 1

_log = logging.getLogger(__name__)


def collector_name(index: int) -> str:
    """Worker name of collector ``index`` (its log is ``RunLayout.log(name)``)."""
    return f"collector{index}"


def learner_name(rank: int) -> str:
    """Worker name of learner ``rank``."""
    return f"learner{rank}"


def evaluator_name() -> str:
    """Worker name of the evaluator."""
    return "evaluator"


class BootTimeline:
    """Logs how long each start-up phase of a worker took, so its log shows where boot time went.

    Args:
        name: The worker's name (``collector3``, ``learner0``).
        profile_to: Also run the start-up (this thread) under cProfile and write it here at
            :meth:`released`, or at :meth:`close` if the start-up ended before its release.
    """

    def __init__(self, name: str, profile_to: Path | None = None) -> None:
        self._name = name
        self._start = self._last = time.perf_counter()
        self._profile_to = profile_to
        self._profile: cProfile.Profile | None = None
        if profile_to is not None:
            self._profile = cProfile.Profile()
            self._profile.enable()

    def mark(self, phase: str) -> None:
        """Log ``phase`` as done now, with its own duration and the time since start."""
        now = time.perf_counter()
        took, self._last = now - self._last, now
        _log.info("%s boot: %s in %.2f s (%.2f s since start)", self._name, phase, took, now - self._start)

    def released(self) -> None:
        """Mark the boot barrier's release, the last phase; write the boot profile if one runs."""
        self.mark("released (every worker ready)")
        self._write_profile("")

    def close(self) -> None:
        """End the boot profile if it still runs (the start-up ended before its release): write it."""
        self._write_profile(" (incomplete: the start-up ended before its release)")

    def _write_profile(self, note: str) -> None:
        profile, self._profile = self._profile, None
        if profile is not None and self._profile_to is not None:
            write_profile(profile, self._profile_to, f"{self._name} boot profile", _log, note)


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            _log.warning("prctl(PR_SET_PDEATHSIG) unavailable; relying on the parent watchdog")
    # Race: the fork server (or the parent) may have died before prctl ran; the signal never comes then.
    forked_by = os.getppid()
    if forked_by == 1 or not pid_alive(parent_pid):
        os._exit(70)

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != forked_by or not pid_alive(parent_pid):
                os._exit(70)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _redirect_output(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s",
        force=True,
    )


_recorded: list[BaseException] = []
"""Failures whose traceback this process already wrote (a worker records its failure before it unwinds)."""

_FAILED = " failed: "
"""What separates the worker from the exception line in an error log's header (Note [error log header])."""
_FAILED_IN_ENV = " failed in its env: "
"""What separates the worker from an env's exception line in an error log's header (the same Note)."""
_EXCEPTION_LINE_MAX = 300
"""Longest exception line (characters) an error log's header keeps; the traceback keeps all of it."""


def exception_line(exc: BaseException) -> str:
    """The exception's type and the first line of its message, as a traceback ends: ``ValueError: bad``.

    The type is qualified by its module unless it is a built-in; the line is cut at 300 characters. An
    env's exception (``fastsac_core.EnvCallError``) is its message alone: ``Pendulum-v1's step() raised
    ValueError: bad (raised at myenv.py:49 in step)`` (Note [error log header]).
    """
    kind = type(exc)
    name = (
        kind.__qualname__
        if kind.__module__ in ("builtins", "__main__")
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    message = str(exc).strip().splitlines()
    if isinstance(exc, EnvCallError) and message:
        line = message[0]
    else:
        line = f"{name}: {message[0]}" if message else name
    return line if len(line) <= _EXCEPTION_LINE_MAX else line[: _EXCEPTION_LINE_MAX - 1] + "…"


class RecordedException(NamedTuple):
    """The exception a worker's error log names (Note [error log header])."""

    line: str
    """Its one line: :func:`exception_line`."""
    in_env: bool
    """Whether an env's own code raised it (``fastsac_core.EnvCallError``): the line names the env's
    exception (``Pendulum-v1's step() raised ...``) rather than starting with its type."""


def recorded_exception(error_log: Path) -> RecordedException | None:
    """The exception a worker's error log names (Note [error log header]); None without one."""
    try:
        with error_log.open(encoding="utf-8", errors="replace") as file:
            header = file.readline().rstrip("\n")
    except OSError:
        return None
    _, _, after = header.partition(")")  # "<worker> (pid <pid>)": the marker follows at once
    for marker, in_env in ((_FAILED, False), (_FAILED_IN_ENV, True)):
        if after.startswith(marker) and len(after) > len(marker):
            return RecordedException(after[len(marker) :], in_env)
    return None


def record_failure(run_dir: Path, name: str, exc: BaseException) -> None:
    """Write ``exc``'s traceback to the worker's error log and its log, now (once per exception).

    A worker calls it the moment its body raises, before it closes anything: a teardown that is cut
    short (the parent terminates a worker that takes too long) still leaves the traceback.
    """
    path = RunLayout(run_dir).error_log(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(traceback.format_exception(exc))
    marker = _FAILED_IN_ENV if isinstance(exc, EnvCallError) else _FAILED
    path.write_text(f"{name} (pid {os.getpid()}){marker}{exception_line(exc)}\n{text}")
    _log.error("%s failed; traceback written to %s\n%s", name, path, text.rstrip())
    _recorded.append(exc)


@contextlib.contextmanager
def worker_process(*, name: str, run_dir: Path, parent_pid: int, threads: int) -> Iterator[None]:
    """Run a worker body with the lifecycle rules of this module.

    Args:
        name: Worker name (``collector0``, ``learner1``): names its log and error files.
        run_dir: The run folder.
        parent_pid: Pid of the parent that must outlive the worker.
        threads: torch intra-op threads of this worker.
    """
    _die_with_parent(parent_pid)
    for stop in STOP_SIGNALS:  # Note [worker signals]
        signal.signal(stop, signal.SIG_IGN)
    _redirect_output(RunLayout(run_dir).log(name))
    # A worker the parent has to kill leaves every thread's stack in its log first.
    faulthandler.register(STACK_DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {*STOP_SIGNALS, STACK_DUMP_SIGNAL})
    os.environ.update(worker_environment(threads))
    torch.set_num_threads(max(1, threads))
    # Since its fork: what came before this line (its arguments unpickled, and what that imports).
    forked = max(0.0, time.time() - process_start_time())  # 10 ms ticks: never below 0
    _log.info(
        "%s started (pid %d, %d torch threads, %.2f s after its fork)",
        name, os.getpid(), torch.get_num_threads(), forked,
    )  # fmt: skip
    try:
        yield
    except BaseException as exc:
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            raise
        if exc not in _recorded:
            record_failure(run_dir, name, exc)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        raise SystemExit(1) from None
    _log.info("%s finished", name)


def bind(cpus: tuple[int, ...] | None, node: int | None) -> None:
    """Bind this process to ``cpus`` and ``node``'s memory (each None: left as it is); logged."""
    if cpus is None and node is None:
        return
    result = bind_current_process(cpus=cpus, nodes=None if node is None else [node])
    _log.info("bound to cpus=%s node=%s: %s", cpus, node, result)


def seed(value: int) -> None:
    """Seed torch and numpy of this process."""
    torch.manual_seed(value)
    np.random.seed(value % 2**32)


@contextlib.contextmanager
def worker_boot(
    *,
    name: str,
    run_dir: Path,
    parent_pid: int,
    threads: int,
    cpus: tuple[int, ...] | None,
    node: int | None,
    seed_value: int,
    stats_queue: Any,
) -> Iterator[BootTimeline]:
    """The start every worker body shares: :func:`worker_process`, then bind and seed; yields its timeline.

    A stop request while the worker waits at the boot barrier (``HandshakeAborted``) ends it cleanly:
    exit 0, no error log.
    """
    with worker_process(name=name, run_dir=run_dir, parent_pid=parent_pid, threads=threads):
        try:
            stats_queue.cancel_join_thread()  # never wait on the parent at exit
            boot = BootTimeline(name, RunLayout(run_dir).boot_profile(name) if profile_boot() else None)
            try:
                bind(cpus, node)
                seed(seed_value)
                yield boot
            finally:
                boot.close()
        except HandshakeAborted:
            _log.info("%s: stop requested during start-up; exiting", name)


def reporting_failure(
    control: Control, slot: int, run_dir: Path, name: str
) -> contextlib.AbstractContextManager[None]:
    """Mark and record this worker's failure before it unwinds (a stop during boot is no failure)."""
    return control.reporting_failure(
        slot, record=functools.partial(record_failure, run_dir, name), ignore=(HandshakeAborted,)
    )
