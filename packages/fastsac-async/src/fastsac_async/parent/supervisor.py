"""The parent's side of worker supervision: spawn, monitor, and a bounded, idempotent shutdown.

Workers start as daemonic processes with keyword arguments only, forked by a fork server that has
already imported torch and the workers' modules, never by the parent itself (Note [fork server]), with
the stop signals blocked until they ignore them (Note [worker signals] in
:mod:`fastsac_async.worker_process`).

# Note [fork server]
Importing torch costs seconds of CPU per process (5.5 s on a 2-core machine); a run starts a learner,
its collectors and an evaluator, so spawning each from scratch paid that once per worker. Workers are
started with multiprocessing's ``forkserver`` method instead: the first start launches one server
process (a fresh interpreter, like a spawned child) that imports :data:`PRELOAD` and the entry modules
of the workers, and every worker is then a fork of that server. A caller may start it before it
prepares a run (:func:`start_fork_server`; the trainer does, before it composes its config), so that
the server's imports overlap the caller's own, and must stop it again (:func:`stop_fork_server`) when
no run will use it: a server still importing notices its parent's end only once its imports are done,
and holds the parent's stdout and stderr open until then. The server never touches CUDA (nothing
it imports does at import time), so each worker initialises CUDA itself, as a spawned one would. The
parent is never forked: its threads, its CUDA context and its open files stay its own. The server lives
as long as the parent (it exits when the parent's end of its pipe closes, a crash included; once its
imports are done, if the parent ends before that), and later runs of the same parent reuse it. What a
spawned child used to inherit from the parent at its start, a forked one inherits from the server
instead, so:
* the server is started with :func:`~fastsac_async.worker_process.worker_environment` (one thread:
  the OpenMP and BLAS libraries read their variables when torch loads them) and with the stop signals
  blocked (Note [worker signals]); each worker then sets its own thread count and variables;
* a worker binds its own CPUs and memory first thing (``worker_boot``), before any large allocation;
* a worker's parent process is the server, so the worker watches the run's parent by pid;
* the server's environment is the parent's when the server started: each worker is handed the
  parent's environment as it is at the worker's start (:class:`ParentEnvironment`, applied as the
  first of its arguments is unpickled, before the others import their modules), so a variable the
  parent sets between two runs (``MUJOCO_GL`` for clips, a compile cache folder) reaches the next
  run's workers, as it did when they were spawned. What the server itself imported read its
  variables at the server's start (torch's OpenMP and BLAS libraries: the first point); MuJoCo's GL
  back-end, CUDA's visible devices and inductor's cache folder are loaded or initialised in the
  worker, after its environment is in place. Dynamo's and inductor's configuration modules (preloaded
  with ``torch._dynamo``) read their ``TORCHDYNAMO_*``, ``TORCHINDUCTOR_*`` and ``TORCH_COMPILE_*``
  variables at the server's start too: one of those set in the parent after the server started (while
  it prepares a run, or between two runs of one process) does not reach the workers (the compile
  cache folder does: inductor reads it at each access, and ``FASTSAC_COMPILE_CACHE=off`` is applied
  again in each worker by ``use_compile_cache``).
  Importing them touches no CUDA and starts no thread. (A main script that imports MuJoCo at its top is
  run again in each worker before the arguments are unpickled, as under spawn.)

If the server dies, every worker dies with it (``PR_SET_PDEATHSIG``), and multiprocessing reports
each one's exit code as 255, since the status it would have read from the server is lost: a failure
with that code while the server is gone names the server (:func:`fork_server_death`).

The monitor treats any worker that exits with a non-zero code (a raised exception, or death by a
signal) as fatal: the caller stops everything and raises
:class:`~fastsac_async.exceptions.WorkerFailed` naming the worker, the exception it raised (read
back from its error log: Note [error log header] in :mod:`fastsac_async.worker_process`), its exit
status and its error log.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import multiprocessing.connection
import multiprocessing.forkserver
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from fastsac_async.exceptions import WorkerFailed, describe_exit
from fastsac_async.run_layout import RunLayout
from fastsac_async.worker_process import (
    STACK_DUMP_SIGNAL,
    recorded_exception,
    stop_signals_blocked,
    worker_environment,
)

__all__ = [
    "PRELOAD",
    "ParentEnvironment",
    "Supervisor",
    "WorkerExit",
    "fork_server_death",
    "run_in_environment",
    "start_fork_server",
    "stop_fork_server",
]

_log = logging.getLogger(__name__)

_POLL_S = 0.05
"""Longest pause between two ``hurry`` checks of a graceful join."""
_STACK_DUMP_WAIT_S = 0.2
"""Time a worker gets to write its stacks (``STACK_DUMP_SIGNAL``) before it is killed."""
PRELOAD = ("numpy", "torch", "torch._dynamo", "fastsac_async.worker_process")
"""What the fork server imports before it forks any worker (Note [fork server]), with the entry
modules of the workers a :class:`Supervisor` is given. ``torch._dynamo`` because a learner's first
optimizer imports it (torch.optim's dynamo guard), most of a learner's boot on a small machine: the
server pays it once per parent process (wiki/benchmarks.md, "Process start and the test suite")."""


def _server() -> Any:
    """The fork server of this process, multiprocessing's (its pid and stop are private: typed as Any)."""
    return multiprocessing.forkserver._forkserver


def start_fork_server(preload: Sequence[str] = ()) -> int | None:
    """Start this process's fork server now, unless one runs (Note [fork server]).

    It imports :data:`PRELOAD` and ``preload`` in its own process, so a caller that starts it early
    (before it imports and sets up the rest of a run) has it ready by the first worker's start. Only the
    first start's ``preload`` counts: a running server is kept as it is.

    Returns:
        The pid of the server this call started; None when one was running.
    """
    server = _server()
    before = server._forkserver_pid
    mp.get_context("forkserver").set_forkserver_preload(list(dict.fromkeys((*PRELOAD, *preload))))
    with _environment(worker_environment(1)), stop_signals_blocked():
        multiprocessing.forkserver.ensure_running()
    pid = server._forkserver_pid
    return None if pid == before else int(pid)


def stop_fork_server(pid: int) -> None:
    """Stop this process's fork server at once if it is still the one of ``pid``, even mid-import.

    It is killed, then multiprocessing's own stop reaps it. For a server started early by
    :func:`start_fork_server` that no run will use; a server that has forked workers takes them with
    it (Note [fork server]). A Ctrl+C meanwhile waits for the end, so multiprocessing's record of its
    server is never left half cleared.
    """
    server = _server()
    if server._forkserver_pid != pid:
        return
    with stop_signals_blocked():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # it blocks the stop signals; closing its pipe waits for its imports
        try:
            server._stop()  # closes the pipe, reaps it, removes its socket
        except OSError:  # reaped or removed elsewhere: clear the record, so the next start starts afresh
            server._forkserver_pid = server._forkserver_alive_fd = server._forkserver_address = None


@dataclass(frozen=True)
class WorkerExit:
    """A worker that has exited."""

    name: str
    """Worker name."""
    exitcode: int | None
    """Exit code (negative: killed by that signal)."""


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_LOST_STATUS = 255
"""The exit code multiprocessing gives a forked worker whose fork server died (Note [fork server])."""
_SERVER_EXIT_WAIT_S = 1.0
"""Longest wait for a dying fork server's exit, once a worker ended with :data:`_LOST_STATUS`."""


def fork_server_death(wait_s: float = _SERVER_EXIT_WAIT_S) -> str | None:
    """Words for this process's fork server if it has died (Note [fork server]); None while it runs.

    A worker's end is seen when the server's pipes close, a moment before the server's own exit is:
    this waits up to ``wait_s`` for it. The server is not reaped here (``WNOWAIT``): multiprocessing
    reaps it, and starts a new one for the next run.
    """
    pid = _server()._forkserver_pid
    if pid is None:
        return None
    deadline = time.monotonic() + wait_s
    while True:
        try:
            ended = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # already reaped: gone
            return f"the fork server (pid {pid}) that started the workers is gone"
        if ended is not None or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    if ended is None:
        return None
    status = (
        describe_exit(-ended.si_status)
        if ended.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
        else describe_exit(ended.si_status)
    )
    return (
        f"the fork server (pid {pid}) that started the workers {status}, taking every worker with "
        f"it (exit code {_LOST_STATUS} stands for a status that was lost)"
    )


class ParentEnvironment:
    """The parent's environment, applied in the worker the moment it is unpickled.

    It is the first argument of :func:`run_in_environment`, so it takes effect before the rest of the
    worker's arguments are unpickled: unpickling those imports their modules (an env factory's module
    imports MuJoCo, which reads ``MUJOCO_GL`` when it loads).

    Args:
        environ: The variables, as ``os.environ`` holds them in the parent.
    """

    def __init__(self, environ: dict[str, str]) -> None:
        self.environ = environ

    def __reduce__(self) -> tuple[Any, ...]:
        return (_applied_environment, (self.environ,))


def _applied_environment(environ: dict[str, str]) -> ParentEnvironment:
    os.environ.clear()
    os.environ.update(environ)
    return ParentEnvironment(environ)


def run_in_environment(
    environ: ParentEnvironment, target: Callable[..., None], kwargs: dict[str, Any]
) -> None:
    """In a worker: ``target(**kwargs)``; ``environ`` put the parent's environment in place when unpickled."""
    del environ  # its work is done (ParentEnvironment.__reduce__)
    target(**kwargs)


class Supervisor:
    """Spawns named workers and watches them.

    Args:
        run_dir: The run folder (``logs/`` and ``async_errors/`` live under it).
        preload: Modules the fork server imports besides :data:`PRELOAD` (the workers' entry modules);
            only the first supervisor of a process starts the server, later ones reuse it as it is.
    """

    def __init__(self, run_dir: Path, preload: Sequence[str] = ()) -> None:
        self.run_dir = run_dir
        self._ctx = mp.get_context("forkserver")
        self._preload = list(preload)
        self._procs: dict[str, BaseProcess] = {}
        self._reported: set[str] = set()
        self._shut_down = False

    @property
    def context(self) -> Any:
        """The multiprocessing context of the workers (for queues shared with them): ``forkserver``."""
        return self._ctx

    @property
    def names(self) -> list[str]:
        """Workers in spawn order."""
        return list(self._procs)

    def spawn(
        self,
        name: str,
        target: Callable[..., None],
        kwargs: dict[str, Any],
        *,
        threads: int,
    ) -> None:
        """Start worker ``name`` running ``target(**kwargs, name=, run_dir=, parent_pid=, threads=)``.

        Args:
            name: Worker name.
            target: Entry point (a module-level function taking keyword arguments only).
            kwargs: Its keyword arguments.
            threads: Its intra-op threads (the worker sets them, and its thread variables, itself).
        """
        full = dict(kwargs, name=name, run_dir=self.run_dir, parent_pid=os.getpid(), threads=threads)
        layout = RunLayout(self.run_dir)
        layout.logs.mkdir(parents=True, exist_ok=True)
        # An earlier launch's error log (a resume into the same folder) would be read as this
        # worker's; its traceback is in the worker's log too, which is appended to.
        layout.error_log(name).unlink(missing_ok=True)
        start_fork_server(self._preload)
        proc = self._ctx.Process(
            target=run_in_environment,
            args=(ParentEnvironment(dict(os.environ)), target, full),
            name=name,
            daemon=True,
        )
        proc.start()
        self._procs[name] = proc
        _log.info("spawned %s (pid %s)", name, proc.pid)

    def pid(self, name: str) -> int | None:
        """Process id of ``name``."""
        return self._procs[name].pid

    def exitcode(self, name: str) -> int | None:
        """Exit code of ``name``, None while it runs."""
        return self._procs[name].exitcode

    def alive(self, names: list[str] | None = None) -> list[str]:
        """Workers still running (of ``names``, or all)."""
        chosen = self._procs if names is None else names
        return [n for n in chosen if self._procs[n].exitcode is None]

    def wait(self, timeout_s: float) -> None:
        """Block until some worker exits or ``timeout_s`` passes."""
        sentinels = [p.sentinel for p in self._procs.values() if p.exitcode is None]
        if sentinels:
            multiprocessing.connection.wait(sentinels, timeout_s)
        else:
            time.sleep(timeout_s)

    def new_exits(self) -> list[WorkerExit]:
        """Workers that exited since the last call."""
        out = []
        for name, proc in self._procs.items():
            if name not in self._reported and proc.exitcode is not None:
                self._reported.add(name)
                out.append(WorkerExit(name, proc.exitcode))
        return out

    def failure(self, exit_: WorkerExit, *, during_boot: bool = False) -> WorkerFailed:
        """The error describing a failed worker: the exception in its error log, or its fork server's death.

        Args:
            exit_: The worker and its exit code.
            during_boot: It failed before every worker was released.
        """
        layout = RunLayout(self.run_dir)
        error_log = layout.error_log(exit_.name)
        server = fork_server_death() if exit_.exitcode == _LOST_STATUS else None
        return WorkerFailed(
            exit_.name,
            exit_.exitcode,
            error_log,
            layout.log(exit_.name),
            during_boot=during_boot,
            error=recorded_exception(error_log),
            detail=server or "",
        )

    def join(self, names: list[str], deadline: float, hurry: Callable[[], bool] = lambda: False) -> None:
        """Join ``names`` until ``deadline`` (time.monotonic) or ``hurry()``; skip names never spawned."""
        for name in names:
            proc = self._procs.get(name)
            while proc is not None and proc.exitcode is None and not hurry():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                proc.join(min(_POLL_S, left))

    def shutdown(
        self,
        order: list[list[str]],
        timeout_s: float,
        before_group: Callable[[int], None],
        hurry: Callable[[], bool] = lambda: False,
    ) -> list[str]:
        """Stop every worker within about ``timeout_s``: join each group, then kill what is left.

        Idempotent. ``before_group(i)`` runs before group ``i`` is joined (e.g. to release learners
        once the collectors are gone). Every stage is isolated, so one failure cannot skip the rest.
        A worker still running after the joins gets ``STACK_DUMP_SIGNAL`` (its stacks go to its
        log), then SIGKILL.

        Args:
            order: Groups of workers to join in turn (collectors first, then learners).
            timeout_s: Total budget of the graceful joins.
            before_group: Hook called with the group index.
            hurry: Polled during the joins; True ends them at once (stop now, no grace).

        Returns:
            The workers that had to be killed (empty after a graceful stop or a second call).
        """
        if self._shut_down:
            return []
        self._shut_down = True
        deadline = time.monotonic() + timeout_s
        for i, group in enumerate(order):
            try:
                before_group(i)
            except Exception:
                _log.exception("shutdown hook %d failed", i)
            share = (deadline - time.monotonic()) / max(1, len(order) - i)
            self.join(group, time.monotonic() + max(0.0, share), hurry)
        left = self.alive()
        if not left:
            return []
        _log.warning("killing %s (stacks in their logs)", ", ".join(left))
        for name in left:
            with contextlib.suppress(Exception):
                os.kill(self._procs[name].pid, STACK_DUMP_SIGNAL)  # type: ignore[arg-type]
        time.sleep(_STACK_DUMP_WAIT_S)
        for name in left:
            with contextlib.suppress(Exception):
                self._procs[name].kill()
        for name in left:
            self._procs[name].join(2.0)
        return left
