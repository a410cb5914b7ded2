"""The workers' fork server: started, handed to a run, or stopped (Note [fork server]).

Importable without torch, so that the trainer starts the server before its own imports: it imports
only the standard library and :mod:`fastsac_async.worker_start`.

# Note [fork server]
Importing torch costs seconds of CPU per process (5.5 s on a 2-core machine); a run starts a learner,
its collectors and an evaluator, so spawning each from scratch paid that once per worker. Workers are
started with multiprocessing's ``forkserver`` method instead: the first start launches one server
process (a fresh interpreter, like a spawned child) that imports :data:`PRELOAD`, the entry modules
of the workers and, unless its starter leaves it to the learner, :data:`LEARNER_PRELOAD`, and every
worker is then a fork of that server. A caller may start it before it prepares
a run (:func:`start_fork_server`, :func:`prestart_workers`; the trainer does, first thing, before it
imports torch or composes its config), so that the server's imports overlap the caller's own, and must
stop it again (:func:`stop_fork_server`) when no run will use it: a server still importing notices its
parent's end only once its imports are done, and holds the parent's stdout and stderr open until then.
The server never touches CUDA (nothing it imports does at import time), so each worker initialises CUDA
itself, as a spawned one would. The parent is never forked: its threads, its CUDA context and its open
files stay its own. The server lives as long as the parent (it exits when the parent's end of its pipe
closes, a crash included; once its imports are done, if the parent ends before that), and later runs of
the same parent reuse it. What a spawned child used to inherit from the parent at its start, a forked
one inherits from the server instead, so:
* the server is started with :func:`~fastsac_async.worker_start.worker_environment` (one thread:
  the OpenMP and BLAS libraries read their variables when torch loads them) and with the stop signals
  blocked (Note [worker signals] in :mod:`fastsac_async.worker_process`); each worker then sets its
  own thread count and variables;
* a worker binds its own CPUs and memory first thing (``worker_boot``), before any large allocation;
* a worker's parent process is the server, so the worker watches the run's parent by pid;
* the server's environment is the parent's when the server started: each worker is handed the
  parent's environment as it is at the worker's start
  (:class:`~fastsac_async.parent.supervisor.ParentEnvironment`, applied as the first of its arguments
  is unpickled, before the others import their modules), so a variable the
  parent sets between two runs (``MUJOCO_GL`` for clips, a compile cache folder) reaches the next
  run's workers, as it did when they were spawned. What the server itself imported read its
  variables at the server's start (torch's OpenMP and BLAS libraries: the first point); CUDA's visible
  devices and inductor's cache folder are initialised in the worker, after its environment is in
  place, and so is a MuJoCo renderer made through gymnasium (it reads ``MUJOCO_GL`` when it is made,
  and imports that back-end then). A caller that preloads MuJoCo (:func:`prestart_workers`' ``preload``)
  fixes ``mujoco.GLContext`` at the server's start, as ``import mujoco`` reads ``MUJOCO_GL``; its
  unset default imports GLFW's bindings (and runs pyGLFW's short version probe, a child process) and
  no OpenGL, so a worker's later renderer made through gymnasium still loads its own back-end, while
  ``MUJOCO_GL=egl`` would load EGL in the server before it forks: the trainer preloads its tasks only
  when no OpenGL library comes with them (``fastsac_trainer.rendering.mujoco_import_is_fork_safe``),
  and catches ``mujoco.GLContext`` up with a later choice before it makes an env that renders
  (``fastsac_trainer.rendering.match_mujoco_gl``). Dynamo's and inductor's configuration modules
  (preloaded with ``torch._dynamo``, :data:`LEARNER_PRELOAD`) read their ``TORCHDYNAMO_*``,
  ``TORCHINDUCTOR_*`` and ``TORCH_COMPILE_*`` variables at the server's start too: one of those set in
  the parent after the server started (while it prepares a run, or between two runs of one process)
  does not reach the workers (the compile cache folder does: inductor reads it at each access, and
  ``FASTSAC_COMPILE_CACHE=off`` is applied again in each worker by ``use_compile_cache``); a server
  started without them leaves that reading to each learner.
  Importing them touches no CUDA and starts no thread. (A main script that imports MuJoCo at its top is
  run again in each worker before the arguments are unpickled, as under spawn.)

If the server dies, every worker dies with it (``PR_SET_PDEATHSIG``), and multiprocessing reports
each one's exit code as 255, since the status it would have read from the server is lost: a failure
with that code while the server is gone names the server
(:func:`~fastsac_async.parent.supervisor.fork_server_death`).

What the server imports is :data:`PRELOAD`, :data:`WORKER_MODULES` (``test_supervisor.py`` checks
that these are the modules of the workers' entry points) and, unless its starter says otherwise,
:data:`LEARNER_PRELOAD`.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
from collections.abc import Iterator, Sequence
from typing import Any

from fastsac_async.worker_start import stop_signals_blocked, worker_environment

__all__ = [
    "LEARNER_PRELOAD",
    "PRELOAD",
    "WORKER_MODULES",
    "PrestartedWorkers",
    "fork_server",
    "prestart_workers",
    "start_fork_server",
    "stop_fork_server",
]

_log = logging.getLogger(__name__)

WORKER_MODULES = (
    "fastsac_async.learner.process",
    "fastsac_async.collector.process",
    "fastsac_async.evaluator.process",
)
"""The modules of the workers' entry points (``run_learner``, ``run_collector``, ``run_evaluator``),
which the fork server imports."""

PRELOAD = ("numpy", "torch", "fastsac_async.worker_process")
"""What every fork server imports before it forks any worker (Note [fork server]), with the entry
modules of the workers a :class:`~fastsac_async.parent.supervisor.Supervisor` is given."""

LEARNER_PRELOAD = ("torch._dynamo",)
"""What only a learner needs and a server preloads unless told otherwise: a learner's first optimizer
imports ``torch._dynamo`` (torch.optim's dynamo guard), about a third of the server's imports.
Preloaded, every learner of the server's process has it at once (a test session runs engine after
engine: wiki/benchmarks.md, "Process start and the test suite"), but the first fork waits for it.
Left to the learner (:func:`prestart_workers` with ``preload_learner=False``), the first fork comes
that much earlier and the learner imports it in its own start, which pays only where the learner has
time to spare (while its collectors make their CUDA contexts, say), not where it would be the last of
the workers to be ready."""


def fork_server() -> Any:
    """The fork server of this process, multiprocessing's (its pid and stop are private: typed as Any)."""
    return multiprocessing.forkserver._forkserver


def start_fork_server(preload: Sequence[str] = (), *, preload_learner: bool = True) -> int | None:
    """Start this process's fork server now, unless one runs (Note [fork server]).

    It imports :data:`PRELOAD`, :data:`LEARNER_PRELOAD` unless ``preload_learner`` is False, and
    ``preload`` in its own process, so a caller that starts it early (before it imports and sets up the
    rest of a run) has it ready by the first worker's start. Only the first start's modules count: a
    running server is kept as it is.

    Returns:
        The pid of the server this call started; None when one was running.
    """
    server = fork_server()
    before = server._forkserver_pid
    learner = LEARNER_PRELOAD if preload_learner else ()
    multiprocessing.get_context("forkserver").set_forkserver_preload(
        list(dict.fromkeys((*PRELOAD, *learner, *preload)))
    )
    # multiprocessing starts its resource tracker first, and unblocks SIGINT and SIGTERM in this thread
    # once the tracker is spawned, whatever was blocked before: started inside the block, the server
    # would be spawned without them blocked and die of a SIGTERM sent to the process group. Started
    # here, the tracker is running, and the server's start leaves the block alone.
    multiprocessing.resource_tracker.ensure_running()
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
    server = fork_server()
    if server._forkserver_pid != pid:
        return
    with stop_signals_blocked():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # it blocks the stop signals; closing its pipe waits for its imports
        try:
            server._stop()  # closes the pipe, reaps it, removes its socket
        except OSError:  # reaped or removed elsewhere: clear the record, so the next start starts afresh
            server._forkserver_pid = server._forkserver_alive_fd = server._forkserver_address = None


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


class PrestartedWorkers:
    """The workers' fork server, started before a run is prepared: :func:`prestart_workers`.

    Either the run is handed it (:meth:`hand_over`, just before the engine starts) or it is stopped
    (:meth:`cancel`): a server that no run will use must not outlive its purpose (Note [fork server]).

    Args:
        pid: The server this call started; None when one was running already (kept either way).
    """

    def __init__(self, pid: int | None) -> None:
        self._pid = pid

    def hand_over(self) -> None:
        """The run starts now and uses the server: :meth:`cancel` does nothing from here on."""
        self._pid = None

    def cancel(self) -> None:
        """Stop the server if this object started it and no run was handed it; idempotent, never raises."""
        pid, self._pid = self._pid, None
        if pid is None:
            return
        try:
            stop_fork_server(pid)
        except Exception:  # the run's own error or exit matters more than a stray server's
            _log.warning("could not stop the workers' fork server (pid %d)", pid, exc_info=True)


def prestart_workers(preload: Sequence[str] = (), *, preload_learner: bool = True) -> PrestartedWorkers:
    """Start the workers' fork server now, so that its imports overlap the caller's own set-up of a run.

    The first run's workers then fork from a server that is ready, or nearly (Note [fork server]).
    The caller hands the result over to the run it starts, or cancels it. Imports no torch.

    Args:
        preload: Modules the server imports too, after :data:`PRELOAD` and the workers' own: what
            unpickling the caller's run imports in every worker (its env factory's module), which
            each worker would otherwise import after its fork, all at once.
        preload_learner: Import :data:`LEARNER_PRELOAD` in the server too (else each learner does, at
            its start: earlier forks, a longer learner start).
    """
    return PrestartedWorkers(start_fork_server((*WORKER_MODULES, *preload), preload_learner=preload_learner))
