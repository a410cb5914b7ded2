"""The parent's side of worker supervision: spawn, monitor, and a bounded, idempotent shutdown.

Workers start as daemonic processes with keyword arguments only, forked by a fork server that has
already imported torch and the workers' modules, never by the parent itself (Note [fork server] in
:mod:`fastsac_async.parent.fork_server`), with the stop signals blocked until they ignore them (Note
[worker signals] in :mod:`fastsac_async.worker_process`).

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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from fastsac_async.exceptions import WorkerFailed, describe_exit
from fastsac_async.parent.fork_server import fork_server, start_fork_server
from fastsac_async.run_layout import RunLayout
from fastsac_async.worker_process import recorded_exception
from fastsac_async.worker_start import STACK_DUMP_SIGNAL

__all__ = [
    "ParentEnvironment",
    "Supervisor",
    "WorkerExit",
    "fork_server_death",
    "run_in_environment",
]

_log = logging.getLogger(__name__)

_POLL_S = 0.05
"""Longest pause between two ``hurry`` checks of a graceful join."""
_STACK_DUMP_WAIT_S = 0.2
"""Time a worker gets to write its stacks (``STACK_DUMP_SIGNAL``) before it is killed."""


@dataclass(frozen=True)
class WorkerExit:
    """A worker that has exited."""

    name: str
    """Worker name."""
    exitcode: int | None
    """Exit code (negative: killed by that signal)."""


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
    pid = fork_server()._forkserver_pid
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
    worker's arguments are unpickled: unpickling those imports their modules, unless the fork server
    imported them already (Note [fork server]).

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
        preload: Modules the fork server imports besides :data:`PRELOAD` and :data:`LEARNER_PRELOAD`
            (the workers' entry modules); only the first supervisor of a process starts the server,
            later ones reuse it as it is (a server started earlier by :func:`prestart_workers` too).
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
        asked = time.perf_counter()
        proc.start()  # the fork server answers once its imports are done: the first start waits for them
        self._procs[name] = proc
        _log.info("spawned %s (pid %s; forked in %.2f s)", name, proc.pid, time.perf_counter() - asked)

    def pid(self, name: str) -> int | None:
        """Process id of ``name``."""
        return self._procs[name].pid

    def exitcode(self, name: str) -> int | None:
        """Exit code of ``name``, None while it runs."""
        return self._procs[name].exitcode

    def dump_stacks(self, names: list[str] | None = None) -> None:
        """Have each live worker of ``names`` (all: None) write every thread's stack to its log; never raises.

        ``STACK_DUMP_SIGNAL``: the worker's ``faulthandler`` writes them and the worker carries on
        (Note [worker signals]).
        """
        for name in self.alive(names):
            with contextlib.suppress(Exception):
                os.kill(self._procs[name].pid, STACK_DUMP_SIGNAL)  # type: ignore[arg-type]

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
        recorded = recorded_exception(error_log)
        return WorkerFailed(
            exit_.name,
            exit_.exitcode,
            error_log,
            layout.log(exit_.name),
            during_boot=during_boot,
            error=None if recorded is None else recorded.line,
            in_env=recorded is not None and recorded.in_env,
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
        self.dump_stacks(left)
        time.sleep(_STACK_DUMP_WAIT_S)
        for name in left:
            with contextlib.suppress(Exception):
                self._procs[name].kill()
        for name in left:
            self._procs[name].join(2.0)
        return left
