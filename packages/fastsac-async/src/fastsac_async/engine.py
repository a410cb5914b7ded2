"""The parent's side of an asynchronous run: allocate, spawn, boot, monitor, shut down, clean up.

# Note [engine lifecycle]
1. Allocate in the parent (the only creator, so the only one to unlink): one ring per collector
   (``HostRing``, or ``RingCursors`` when its learner allocates a CUDA-IPC ring), one weight channel
   per collector, the shared :class:`~fastsac_async.control.Control`, the stats queue and the
   :class:`~shm_transport.StartupHandshake`.
2. Report every worker as "waiting" (the console knows the total from the start); spawn learners,
   then collectors (each inside ``numa_bind.bound_for_child`` when placed on a node), report each as
   "booting"; wait for every "ready" (``boot_timeout_s``) while watching for a worker that dies
   during start-up; release them together.
3. Monitor: collect stats, call back, stop on request or time limit (stop flag), fail on any
   worker that exits non-zero, finish when every learner is done.
4. Names: once every worker reported ready (so every one has attached), the parent unlinks every
   segment name (create -> attach all -> unlink): the mappings live on, and /dev/shm holds nothing
   of the run from then on, whatever crashes later (the parent included).
5. Shut down (always, bounded, idempotent, each step isolated so none can skip the next): stop
   flag; join collectors; let the learners exit (a CUDA-IPC allocation must outlive its
   consumers); join learners; kill what is left (its stacks go to its log first). ``should_abort``
   cuts the joins short: a stop at once, with no final checkpoint. Then close the queues, the
   handshake and every segment (and unlink any name still there after a failed boot).
6. A janitor process, started before anything is allocated and told every worker's pid, removes
   what a SIGKILLed parent could not (Note [janitor]).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from fastsac_async.control import Control
from fastsac_async.exceptions import BootTimeoutError, RunAborted, WorkerFailed
from fastsac_async.janitor import Janitor
from fastsac_async.profiling import profile_iterations
from fastsac_async.spec import (
    EngineSpec,
    IpcRingHandles,
    checkpoint_file,
    collector_name,
    learner_name,
    learner_threads,
    rendezvous_file,
    ring_layout,
    weight_extras,
)
from fastsac_async.stats import CollectorSnapshot, CollectorSummary, LearnerSnapshot, aggregate_collectors
from fastsac_async.supervisor import Supervisor, WorkerExit
from fastsac_async.workers import run_collector, run_learner
from fastsac_core import build_actor, discard_partial_checkpoints, peek_checkpoint
from numa_bind import bound_for_child
from shm_transport import (
    HandshakeAborted,
    HostRing,
    RingCursors,
    StartupHandshake,
    WeightChannel,
    cleanup_stale_segments,
    default_prefix,
)

__all__ = ["AsyncEngine", "EngineResult", "EngineStats", "StopReason", "run_engine"]

_log = logging.getLogger(__name__)

_MARKED_EXIT_WAIT_S = 2.0
"""Longest wait for a worker that marked its failure to exit, so its exit code can be named."""

_FINAL_SNAPSHOT_WAIT_S = 2.0
"""Longest wait, once every learner is done, for the snapshot that names the final checkpoint."""


@dataclass(frozen=True, kw_only=True)
class EngineStats:
    """One stats tick of a running engine (built when learner 0 reports)."""

    elapsed_s: float
    """Seconds since release."""
    global_step: int
    """Full batches seen by learner 0."""
    collector_steps: list[int]
    """Steps of every collector."""
    updates: int
    """Updates run by learner 0."""
    learners: dict[int, LearnerSnapshot]
    """Latest snapshot of each rank."""
    collectors: dict[int, CollectorSnapshot]
    """Latest snapshot of each collector."""
    summary: CollectorSummary
    """Collectors aggregated."""
    checkpoint: str | None = None
    """A checkpoint written since the last tick."""


StopReason = Literal["completed", "time_limit", "stop_requested", "stopped_during_boot"]
"""Why a run ended: its budget was reached, ``time_limit_s`` passed, or a stop was asked for."""


@dataclass(frozen=True, kw_only=True)
class EngineResult:
    """How a run ended."""

    global_step: int
    """Full batches seen by learner 0."""
    collector_steps: list[int]
    """Steps of every collector."""
    updates: int
    """Updates run by learner 0."""
    stopped_early: bool
    """A stop was requested (Ctrl+C, should_stop, time limit) before the budget was reached."""
    stop_reason: StopReason = "completed"
    """Why it ended: the budget was reached, ``time_limit_s`` passed, a stop was asked for, or it was
    asked for before every worker was ready (nothing trained, no checkpoint)."""
    last_checkpoint: str | None = None
    """The last checkpoint written."""
    elapsed_s: float = 0.0
    """Seconds of training (boot excluded)."""


@dataclass
class _Segments:
    rings: list[HostRing | RingCursors] = field(default_factory=list)
    channels: list[WeightChannel] = field(default_factory=list)

    def unlink(self) -> None:
        """Remove every name (idempotent); mappings stay valid in every process that attached."""
        for seg in [*self.rings, *self.channels]:
            try:
                seg.unlink()
            except Exception:
                _log.exception("could not unlink a segment")

    def release(self) -> None:
        self.unlink()
        for seg in [*self.rings, *self.channels]:
            with contextlib.suppress(Exception):
                seg.close()
        self.rings.clear()
        self.channels.clear()


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

    def _allocate(self, segments: _Segments) -> tuple[dict[int, Any], dict[int, Any]]:
        spec, dims = self.spec, self.spec.dims
        numel = sum(p.numel() for p in build_actor(dims, spec.agent).parameters())
        ring_handles: dict[int, Any] = {}
        weight_handles: dict[int, Any] = {}
        for c in spec.topology.collectors:
            cap = spec.options.ring_capacity
            width = c.env_stop - c.env_start
            # A host ring always exists: it is the transport, or the fallback a learner takes when
            # CUDA IPC fails on its device (a virtualised GPU, say); an unused one costs a little
            # shared memory until the names are unlinked after boot.
            host = HostRing.create(ring_layout(dims, width), cap)
            segments.rings.append(host)
            if c.transition_transport == "cuda_ipc":
                cursors = RingCursors.create(cap)
                segments.rings.append(cursors)
                ring_handles[c.index] = IpcRingHandles(cursors=cursors.handle, fallback=host.handle)
            else:
                ring_handles[c.index] = host.handle
            # Host slots always, for the same reason (two copies of the actor's parameters).
            channel = WeightChannel.create(numel, weight_extras(dims), host_slots=True)
            segments.channels.append(channel)
            weight_handles[c.index] = channel.handle
        return ring_handles, weight_handles

    def run(
        self,
        *,
        on_stats: Callable[[EngineStats], None] = lambda stats: None,
        on_boot: Callable[[str, str], None] = lambda worker, state: None,
        should_stop: Callable[[], bool] = lambda: False,
        should_abort: Callable[[], bool] = lambda: False,
    ) -> EngineResult:
        """Run to the end of the budget, a stop request, or a worker failure.

        Args:
            on_stats: Called with every stats tick.
            on_boot: ``(worker, state)`` during start-up: ``waiting`` (every worker, before the first
                is spawned), ``booting``, ``ready``, ``running``.
            should_stop: Polled; True requests a clean stop (final checkpoint included).
            should_abort: Polled, also during the shutdown; True stops at once: every worker is
                killed (no final checkpoint), everything is released, and :class:`RunAborted` is raised.

        Raises:
            WorkerFailed: A worker exited unexpectedly (the run was stopped and cleaned up).
            BootTimeoutError: Workers did not report ready within ``boot_timeout_s``.
            RunAborted: ``should_abort()`` turned true (the run was stopped and cleaned up).
        """
        spec = self.spec
        sup = Supervisor(spec.run_dir)
        ctx = sup.context
        control = Control(spec.num_collectors, spec.num_learners)
        if spec.resume_from is not None:
            # Every collector restarts at the checkpoint's global step, whatever its own count was
            # (a stop leaves them uneven): generations pair the k-th slot of every ring, so the rings
            # must start level, or the surplus of the collectors that were behind never forms a
            # generation and the run never finishes. The replay is not in the checkpoint: nothing
            # is lost, and the learners owe nothing for earlier gsteps.
            gstep = int(peek_checkpoint(spec.resume_from)["extra"].get("iteration", 0))
            control.resume_collector_steps([gstep] * spec.num_collectors)
        # A parent killed during an earlier run's boot left its segments named: sweep those whose
        # creator is dead (never a live process's).
        stale = cleanup_stale_segments()
        if stale:
            _log.info("removed %d stale shared-memory segment(s) of dead runs: %s", len(stale), stale)
        segments = _Segments()
        # A run killed before its learners joined leaves their file rendezvous behind; a new group
        # would read the dead one's entries from it and hang or fail.
        rendezvous_file(spec.run_dir).unlink(missing_ok=True)
        workers = self._learners + self._collectors
        janitor = Janitor.start(default_prefix())  # cleans up if this process dies: Note [janitor]
        with janitor.semaphores_made():  # the queues' and the handshake's, for the janitor
            handshake = StartupHandshake(ctx, collectors=self._collectors, workers=workers)
            # One bounded queue per worker: a worker killed while holding a queue's write lock can
            # block only its own queue, never another worker's stats.
            queues = {name: ctx.Queue(maxsize=16) for name in workers}
        try:
            ring_handles, weight_handles = self._allocate(segments)
            for name in workers:  # every row (and the total) is known before the first is spawned
                on_boot(name, "waiting")
            common = {"spec": spec, "control": control, "handshake": handshake}
            for p in spec.topology.learners:
                own = {c.index for c in spec.topology.collectors_of(p.rank)}
                self._spawn(
                    sup, learner_name(p.rank), run_learner, p.numa_node, learner_threads(spec, p),
                    dict(common, rank=p.rank, stats_queue=queues[learner_name(p.rank)],
                         ring_handles={i: h for i, h in ring_handles.items() if i in own},
                         weight_handles={i: h for i, h in weight_handles.items() if i in own}),
                    on_boot, janitor,
                )  # fmt: skip
            for c in spec.topology.collectors:
                threads = len(c.cpus) if c.cpus else 1
                self._spawn(sup, collector_name(c.index), run_collector, c.numa_node, threads,
                            dict(common, index=c.index, stats_queue=queues[collector_name(c.index)]),
                            on_boot, janitor)  # fmt: skip
            try:
                self._boot(sup, control, handshake, on_boot, lambda: should_stop() or should_abort())
            except HandshakeAborted:  # a stop request before every worker was ready (Ctrl+C at boot)
                if should_abort():
                    raise RunAborted("stopped at once during start-up: nothing was trained") from None
                _log.info("stop requested during start-up: nothing was trained")
                return EngineResult(
                    global_step=control.global_step, collector_steps=control.all_collector_steps(),
                    updates=control.updates, stopped_early=True, stop_reason="stopped_during_boot",
                )  # fmt: skip
            # Every worker has attached: drop the names now, so no crash (not even the parent's)
            # can leave a segment behind in /dev/shm.
            segments.unlink()
            # Collectors' queues first: a tick built from learner 0's snapshot then holds the collector
            # snapshots sent before it (the last tick included).
            ordered = [queues[name] for name in self._collectors + self._learners]
            return self._monitor(sup, control, ordered, on_stats, should_stop, should_abort)
        finally:
            control.request_stop()

            def stop_workers() -> None:
                killed = sup.shutdown(
                    [self._collectors, self._learners],
                    spec.shutdown_timeout_s,
                    before_group=lambda i: control.release_learners() if i == 1 else None,
                    hurry=should_abort,
                )
                if any(name in self._learners for name in killed):  # maybe in the middle of a save
                    for tmp in discard_partial_checkpoints(checkpoint_file(spec.run_dir, 0).parent):
                        _log.info("removed %s (a checkpoint its killed writer did not finish)", tmp)

            def close_queues() -> None:
                for q in queues.values():
                    q.close()
                    q.cancel_join_thread()

            for step in (stop_workers, handshake.close, close_queues, segments.release, janitor.close):
                try:
                    step()
                except Exception:  # the next steps still run: nothing of the run may outlive it
                    _log.exception("shutdown step %s failed", getattr(step, "__name__", step))

    def _spawn(
        self,
        sup: Supervisor,
        name: str,
        target: Callable[..., None],
        node: int | None,
        threads: int,
        kwargs: dict[str, Any],
        on_boot: Callable[[str, str], None],
        janitor: Janitor,
    ) -> None:
        placement = None if node is None else (lambda: bound_for_child(nodes=[node]))
        sup.spawn(name, target, kwargs, threads=threads, placement=placement)
        janitor.watch(sup.pid(name))
        on_boot(name, "booting")

    def _worker_of_slot(self, slot: int) -> str:
        collectors = len(self._collectors)
        return self._collectors[slot] if slot < collectors else self._learners[slot - collectors]

    def _first_failure(
        self, sup: Supervisor, control: Control, exits: list[WorkerExit], detail: str = ""
    ) -> WorkerFailed | None:
        """The failed worker to name, if any (Note [naming the failed worker]); None while none failed.

        # Note [naming the failed worker]
        A worker marks its failure in ``Control`` the moment an exception leaves its body, before it
        unwinds (a CUDA-IPC learner's teardown waits for its collectors, and would hide the failure
        for as long). One failure often causes others: a dead learner makes its peers' collectives
        fail, and they raise too. So the worker named is, in order: one killed by a signal (it could
        not mark, and no failure of another worker makes the kernel or a user signal it), else the
        earliest mark (one host-wide clock), else the first non-zero exit seen (a worker that raised
        before or after its marked block). Before naming a mark the
        parent asks every worker to stop and waits (bounded) for the marked worker's exit, so the
        message carries its exit code and any unmarked death that came first has been seen.
        """
        marks = control.failures()
        dead = [e for e in exits if e.exitcode != 0]
        signalled = [e for e in dead if e.exitcode is not None and e.exitcode < 0]
        if signalled:
            return sup.failure(signalled[0], detail)
        if not marks:
            return sup.failure(dead[0], detail) if dead else None
        name = self._worker_of_slot(min(marks, key=lambda slot: marks[slot]))
        control.request_stop()
        sup.join([name], time.monotonic() + _MARKED_EXIT_WAIT_S)
        later = [e for e in sup.new_exits() if e.exitcode is not None and e.exitcode < 0]
        if later:
            return sup.failure(later[0], detail)
        return sup.failure(WorkerExit(name, sup.exitcode(name)), detail)

    def _boot(
        self,
        sup: Supervisor,
        control: Control,
        handshake: StartupHandshake,
        on_boot: Callable[[str, str], None],
        should_stop: Callable[[], bool],
    ) -> None:
        deadline = time.monotonic() + self.spec.options.boot_timeout_s
        dead: list[WorkerFailed] = []

        def abort() -> bool:
            exits = sup.new_exits()
            failure = self._first_failure(sup, control, exits, "during start-up")
            if failure is None and exits:  # any exit before ready fails the boot, a clean one too
                failure = sup.failure(exits[0], "during start-up")
            if failure is not None:
                dead.append(failure)
            return bool(dead) or should_stop()

        def ready(worker: str) -> None:
            on_boot(worker, "ready")

        try:
            handshake.wait_all_ready(
                timeout_s=max(0.0, deadline - time.monotonic()), should_stop=abort, on_ready=ready
            )
        except HandshakeAborted:
            if dead:
                raise dead[0] from None
            raise
        except TimeoutError as exc:  # HandshakeTimeout
            raise BootTimeoutError(
                sup.alive(), self.spec.options.boot_timeout_s, self.spec.run_dir / "logs"
            ) from exc
        handshake.release()
        for name in sup.names:
            on_boot(name, "running")

    def _monitor(
        self,
        sup: Supervisor,
        control: Control,
        stats_queues: list[Any],
        on_stats: Callable[[EngineStats], None],
        should_stop: Callable[[], bool],
        should_abort: Callable[[], bool],
    ) -> EngineResult:
        spec = self.spec
        start = time.monotonic()
        learners: dict[int, LearnerSnapshot] = {}
        collectors: dict[int, CollectorSnapshot] = {}
        reported: list[str] = []  # checkpoints named by rank 0's snapshots, in order
        last_checkpoint: str | None = None
        stopped_early = False
        stop_reason: StopReason = "completed"

        def forward() -> None:
            """Take every queued snapshot; call ``on_stats`` for each of rank 0."""
            for item in _drain(stats_queues):
                if isinstance(item, CollectorSnapshot):
                    collectors[item.index] = item
                elif isinstance(item, LearnerSnapshot):
                    learners[item.rank] = item
                    if item.checkpoint:
                        reported.append(item.checkpoint)
                    if item.rank == 0:
                        on_stats(
                            EngineStats(
                                elapsed_s=time.monotonic() - start,
                                global_step=control.global_step,
                                collector_steps=control.all_collector_steps(),
                                updates=control.updates,
                                learners=dict(learners),
                                collectors=dict(collectors),
                                summary=aggregate_collectors(list(collectors.values())),
                                checkpoint=item.checkpoint,
                            )
                        )

        while True:
            sup.wait(0.05)
            exits = sup.new_exits()
            failure = self._first_failure(sup, control, exits)
            if failure is not None:
                raise failure
            for exit_ in exits:
                if exit_.name in self._learners and not control.learner_done(int(exit_.name[7:])):
                    raise sup.failure(exit_)  # exited 0 before its loop was done
            forward()
            if all(control.learner_done(r) for r in range(spec.num_learners)):
                # Done, final checkpoint included: an abort from here on only hurries the shutdown.
                last_checkpoint = self._final_checkpoint(control, reported, forward, should_abort)
                break
            if should_abort():
                _log.warning("stopping at once: no final checkpoint")
                raise RunAborted(f"stopped at once at global step {control.global_step}: no final checkpoint")
            over_time = spec.time_limit_s is not None and time.monotonic() - start > spec.time_limit_s
            if not control.stop_requested and (over_time or should_stop()):
                stop_reason = "time_limit" if over_time else "stop_requested"
                _log.info("%s; learners finish with a checkpoint", stop_reason.replace("_", " "))
                control.request_stop()
                stopped_early = True
        return EngineResult(
            global_step=control.global_step,
            collector_steps=control.all_collector_steps(),
            updates=control.updates,
            stopped_early=stopped_early,
            stop_reason=stop_reason,
            last_checkpoint=last_checkpoint,
            elapsed_s=time.monotonic() - start,
        )

    def _final_checkpoint(
        self,
        control: Control,
        reported: list[str],
        forward: Callable[[], None],
        should_abort: Callable[[], bool] = lambda: False,
    ) -> str | None:
        """The run's last checkpoint, once every learner is done.

        Learner 0 records its final checkpoint in ``control`` before its done flag, so the path is
        known even if the snapshot that names it is still in its queue's feeder thread (or was
        dropped by a full queue). That snapshot carries the console's "saved" line: wait for it
        briefly (bounded, and not at all once ``should_abort()``).
        """
        step = control.final_checkpoint_step
        if step is None:
            return reported[-1] if reported else None
        final = str(checkpoint_file(self.spec.run_dir, step))
        deadline = time.monotonic() + _FINAL_SNAPSHOT_WAIT_S
        while final not in reported and time.monotonic() < deadline and not should_abort():
            time.sleep(0.02)
            forward()
        return final


def _drain(queues: list[Any]) -> list[object]:
    items: list[object] = []
    for q in queues:
        while True:
            try:
                items.append(q.get_nowait())
            except queue.Empty:
                break
    return items


def run_engine(
    spec: EngineSpec,
    on_stats: Callable[[EngineStats], None] = lambda stats: None,
    on_boot: Callable[[str, str], None] = lambda worker, state: None,
    should_stop: Callable[[], bool] = lambda: False,
    should_abort: Callable[[], bool] = lambda: False,
) -> EngineResult:
    """Run ``spec`` with :class:`AsyncEngine` (see :meth:`AsyncEngine.run`)."""
    return AsyncEngine(spec).run(
        on_stats=on_stats, on_boot=on_boot, should_stop=should_stop, should_abort=should_abort
    )
