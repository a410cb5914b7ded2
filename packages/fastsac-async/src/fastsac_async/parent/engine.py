"""The parent's side of an asynchronous run: allocate, spawn, boot, monitor, shut down, clean up.

# Note [engine lifecycle]
1. Allocate in the parent (the only creator, so the only one to unlink): each collector's ring and
   weight channel as the plan names them (:func:`~fastsac_async.transport.offer_transports`, Note
   [transport by name]), the shared :class:`~fastsac_async.control.Control`, the stats queues and
   the :class:`~shm_transport.StartupHandshake`.
2. Report every worker as "waiting" (the console knows the total from the start); spawn learners,
   then collectors (each binds its own CPUs and node first: Note [fork server]), then the
   evaluator when evaluation is on (Note [evaluation during training]), report each as
   "booting"; wait for every "ready" (``boot_timeout_s``) while watching for a worker that dies
   during start-up; release them together.
3. Monitor (:class:`~fastsac_async.parent.monitor.RunWatch`): collect stats, call back, stop on
   request or time limit (stop flag), fail on any worker that exits non-zero, finish when every
   learner is done: then raise the stop flag, wait (bounded) for the final checkpoint's snapshot
   and for the evaluator to exit, and send one more tick if evaluations finished after rank 0's
   last snapshot, so every finished evaluation is reported.
4. Names: once every worker reported ready (so every one has attached), the parent unlinks every
   segment name and the name of every semaphore of the queues and the handshake (create -> attach
   all -> unlink): the mappings live on, and /dev/shm holds nothing of the run from then on,
   whatever crashes later (the parent included, its janitor too).
5. Shut down (always, bounded, idempotent, each step isolated so none can skip the next): stop
   flag; join collectors and the evaluator (the weight readers); let the learners exit (a CUDA-IPC
   allocation must outlive its consumers); join learners; kill what is left (its stacks go to its
   log first). An abort (``should_abort``, or ``force_abort``) cuts the joins short: a stop at once,
   with no final checkpoint (:meth:`Control.abort_due` says when).
   Then close the queues, the handshake and every segment, and unlink any name still there after a
   failed boot (segments and semaphores: the objects may live on in a traceback, their names do
   not), before the janitor is told the run is done.
6. A janitor process, started before anything is allocated and told every worker's pid, removes
   what a SIGKILLed parent could not (Note [janitor]).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastsac_async.collector.process import run_collector
from fastsac_async.control import Control
from fastsac_async.evaluator.process import run_evaluator
from fastsac_async.exceptions import RunAborted
from fastsac_async.hosts import has_evaluator
from fastsac_async.learner.process import run_learner
from fastsac_async.learner.profiler import profile_iterations
from fastsac_async.parent.fork_server import WORKER_MODULES
from fastsac_async.parent.janitor import Janitor
from fastsac_async.parent.monitor import EngineResult, EngineStats, RunWatch, StopReason
from fastsac_async.parent.supervisor import Supervisor
from fastsac_async.spec import EngineSpec, learner_threads
from fastsac_async.transport import Segments, offer_transports
from fastsac_async.worker_process import collector_name, evaluator_name, learner_name
from fastsac_core import discard_partial_checkpoints, peek_checkpoint
from shm_transport import HandshakeAborted, StartupHandshake, cleanup_stale_segments, default_prefix

__all__ = [
    "AsyncEngine",
    "EngineResult",
    "EngineStats",
    "StopReason",
    "run_engine",
]

_log = logging.getLogger(__name__)


class AsyncEngine:
    """Runs one asynchronous training run (see Note [engine lifecycle]).

    Args:
        spec: The resolved run.
    """

    def __init__(self, spec: EngineSpec) -> None:
        # The options checked themselves when built (AsyncOptions), the counts when the topology was.
        profile_iterations()  # an invalid FASTSAC_PROFILE_LEARNER fails here, before anything starts
        self.spec = spec
        self._collectors = [collector_name(c.index) for c in spec.topology.collectors]
        self._learners = [learner_name(p.rank) for p in spec.topology.learners]
        # The evaluator reads weights like a collector and goes down with them (Note [evaluation
        # during training] in fastsac_async.evaluator.loop).
        self._evaluators = [evaluator_name()] if has_evaluator(spec) else []

    def run(
        self,
        *,
        on_stats: Callable[[EngineStats], None] = lambda stats: None,
        on_boot: Callable[[str, str], None] = lambda worker, state: None,
        should_stop: Callable[[], bool] = lambda: False,
        should_abort: Callable[[], bool] = lambda: False,
        force_abort: Callable[[], bool] = lambda: False,
    ) -> EngineResult:
        """Run to the end of the budget, a stop request, or a worker failure.

        Args:
            on_stats: Called with every stats tick.
            on_boot: ``(worker, state)`` during start-up: ``waiting`` (every worker, before the first
                is spawned), ``booting``, ``ready``, ``running``.
            should_stop: Polled; True requests a clean stop (final checkpoint included).
            should_abort: Polled, also during the shutdown; True stops at once: every worker is
                killed (no final checkpoint), everything is released, and :class:`RunAborted` is raised;
                a learner's final checkpoint and replay write in progress are waited for first, each
                up to its bound (Note [a stop waits for the replay write] in ``fastsac_core``).
            force_abort: Polled like ``should_abort``; True stops at once without waiting for a
                learner's final saves (a second signal).

        Raises:
            WorkerFailed: A worker exited unexpectedly (the run was stopped and cleaned up).
            BootTimeoutError: Workers did not report ready within ``boot_timeout_s``.
            RunAborted: ``should_abort()`` or ``force_abort()`` turned true (the run was stopped and
                cleaned up).
        """
        spec = self.spec
        sup = Supervisor(spec.run.run_dir, preload=WORKER_MODULES)
        ctx = sup.context
        control = Control(spec.num_collectors, spec.num_learners)

        def abort_now() -> bool:
            return control.abort_due(aborted=should_abort(), forced=force_abort())

        if spec.run.resume_from is not None:
            # Every collector restarts at the checkpoint's global step, whatever its own count was
            # (a stop leaves them uneven): generations pair the k-th slot of every ring, so the rings
            # must start level, or the surplus of the collectors that were behind never forms a
            # generation and the run never finishes. The learners owe nothing for earlier gsteps. Each
            # learner's replay (its own file, Note [replay file]) keeps its envs' own step counts: the
            # few steps a collector took past the checkpoint stay there and are taken again.
            gstep = int(peek_checkpoint(spec.run.resume_from)["extra"].get("iteration", 0))
            control.resume_collector_steps([gstep] * spec.num_collectors)
        # A parent killed during an earlier run's boot left its segments named: sweep those whose
        # creator is dead (never a live process's).
        stale = cleanup_stale_segments()
        if stale:
            _log.info("removed %d stale shared-memory segment(s) of dead runs: %s", len(stale), stale)
        segments = Segments()
        # A run killed before its learners joined leaves their file rendezvous behind; a new group
        # would read the dead one's entries from it and hang or fail.
        spec.run.layout.rendezvous.unlink(missing_ok=True)
        readers = self._collectors + self._evaluators  # each gets one startup message
        workers = self._learners + readers
        janitor = Janitor.start(default_prefix())  # cleans up if this process dies: Note [janitor]
        with janitor.semaphores_made():  # the queues' and the handshake's, for the janitor
            handshake = StartupHandshake(ctx, readers=readers, workers=workers)
            # One bounded queue per worker: a worker killed while holding a queue's write lock can
            # block only its own queue, never another worker's stats.
            queues = {name: ctx.Queue(maxsize=16) for name in workers}
        try:
            ring_offers, weight_offers = offer_transports(spec, segments)  # Note [transport by name]
            for name in workers:  # every row (and the total) is known before the first is spawned
                on_boot(name, "waiting")
            common = {"spec": spec, "control": control, "handshake": handshake}
            for p in spec.topology.learners:
                own = {c.index for c in spec.topology.collectors_of(p.rank)}
                self._spawn(
                    sup, learner_name(p.rank), run_learner, learner_threads(spec, p),
                    dict(common, rank=p.rank, stats_queue=queues[learner_name(p.rank)],
                         ring_offers={i: o for i, o in ring_offers.items() if i in own},
                         weight_offers={i: o for i, o in weight_offers.items() if i in own}),
                    on_boot, janitor,
                )  # fmt: skip
            for c in spec.topology.collectors:
                threads = len(c.cpus) if c.cpus else 1
                self._spawn(sup, collector_name(c.index), run_collector, threads,
                            dict(common, index=c.index, stats_queue=queues[collector_name(c.index)]),
                            on_boot, janitor)  # fmt: skip
            for name in self._evaluators:  # one thread, unpinned, niced: it yields to every other worker
                self._spawn(sup, name, run_evaluator, 1, dict(common, stats_queue=queues[name]),
                            on_boot, janitor)  # fmt: skip
            watch = RunWatch(spec, sup, control, self._collectors, self._learners, self._evaluators)
            try:
                watch.boot(handshake, on_boot, lambda: should_stop() or should_abort() or force_abort())
            except HandshakeAborted:  # a stop request before every worker was ready (Ctrl+C at boot)
                if should_abort() or force_abort():
                    raise RunAborted("stopped at once during start-up: nothing was trained") from None
                _log.info("stop requested during start-up: nothing was trained")
                return EngineResult(
                    global_step=control.global_step, collector_steps=control.all_collector_steps(),
                    updates=control.updates, stopped_early=True, stop_reason="stopped_during_boot",
                )  # fmt: skip
            # Every worker has attached: drop the names now, so no crash (not even the parent's)
            # can leave a segment or a semaphore behind in /dev/shm.
            segments.unlink()
            janitor.unlink_semaphores()
            # Collectors' queues first: a tick built from learner 0's snapshot then holds the collector
            # snapshots sent before it (the last tick included).
            ordered = [queues[name] for name in readers + self._learners]
            return watch.monitor(ordered, on_stats, should_stop, abort_now)
        finally:
            control.request_stop()

            def stop_workers() -> None:
                killed = sup.shutdown(
                    [readers, self._learners],
                    spec.shutdown_timeout_s,
                    before_group=lambda i: control.release_learners() if i == 1 else None,
                    hurry=abort_now,
                )
                # A learner killed, or one that failed, may have been in the middle of a save (its
                # replay writer is a thread that dies with it): every learner is gone by now.
                failed = [n for n in self._learners if n in killed or (n in sup.names and sup.exitcode(n))]
                if failed:
                    for tmp in discard_partial_checkpoints(spec.run.layout.checkpoints):
                        _log.info("removed %s (a file its writer, %s, did not finish)", tmp, "/".join(failed))

            def close_queues() -> None:
                for q in queues.values():
                    q.close()
                    q.cancel_join_thread()

            for step in (
                stop_workers,
                handshake.close,
                close_queues,
                segments.release,
                janitor.unlink_semaphores,
                janitor.close,
            ):
                try:
                    step()
                except Exception:  # the next steps still run: nothing of the run may outlive it
                    _log.exception("shutdown step %s failed", getattr(step, "__name__", step))

    def _spawn(
        self,
        sup: Supervisor,
        name: str,
        target: Callable[..., None],
        threads: int,
        kwargs: dict[str, Any],
        on_boot: Callable[[str, str], None],
        janitor: Janitor,
    ) -> None:
        sup.spawn(name, target, kwargs, threads=threads)
        janitor.watch(sup.pid(name))
        on_boot(name, "booting")


def run_engine(
    spec: EngineSpec,
    on_stats: Callable[[EngineStats], None] = lambda stats: None,
    on_boot: Callable[[str, str], None] = lambda worker, state: None,
    should_stop: Callable[[], bool] = lambda: False,
    should_abort: Callable[[], bool] = lambda: False,
    force_abort: Callable[[], bool] = lambda: False,
) -> EngineResult:
    """Run ``spec`` with :class:`AsyncEngine` (see :meth:`AsyncEngine.run`)."""
    return AsyncEngine(spec).run(
        on_stats=on_stats,
        on_boot=on_boot,
        should_stop=should_stop,
        should_abort=should_abort,
        force_abort=force_abort,
    )
