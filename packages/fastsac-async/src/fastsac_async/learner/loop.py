"""One learner rank's loop, drivable in-process: drain, decide, update in chunks, publish.

The process entry point (:func:`fastsac_async.learner.process.run_learner`) builds a :class:`Learner` from
shared memory; unit tests build one around in-process rings and call :meth:`Learner.run_iteration`.

# Note [a stop keeps what was counted]
A run's gstep counts the steps its collectors *pushed* (``collector_steps // num_collectors``), and
updates are owed for them as soon as they are counted (Note [training decision]); under strict
back-pressure a learner behind its collectors holds both a ring of slots not yet ingested and a debt
of updates. A resume restarts the collectors at the checkpoint's gstep and its decider at the
checkpoint's update count, so a stop that dropped either would leave the resumed run with those steps
missing from its replay and those updates never run, for good (up to ``ring_capacity`` steps per
collector, and ``num_updates`` for each). So a stop first ingests every slot its rings hold
(:meth:`Ingestor.drain_rest`, no updates: the final checkpoint and replay write come at once), and
every checkpoint records the updates still owed (``owed_updates``), which a resumed decider owes
again (``TrainDecider(start_owed=...)``): the resumed run runs them first, as the uninterrupted
one would have.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from fastsac_async.learner.cpu_loan import borrowed_cpus
from fastsac_async.learner.decider import Decision, PublishCadence, TrainDecider, split_chunks
from fastsac_async.learner.device_timing import DeviceSpanTimer
from fastsac_async.learner.ingest import Ingestor
from fastsac_async.learner.profiler import PROFILE_AFTER_UPDATES, profiled
from fastsac_async.learner.publisher import DeferredPublisher
from fastsac_async.stats import LEARNER_STAGES, LearnerSnapshot, StageTimer
from fastsac_async.transport import PUBLISHED_GSTEP, published_stamp
from fastsac_core import FastSACAgent, ReplayFileInfo, ReplaySaver, save_checkpoint, sync_normalizers
from shm_transport import TransitionRing, WeightWriter

__all__ = ["Learner", "LearnerHooks", "LearnerSettings", "run_learner_loop"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class LearnerSettings:
    """Knobs of a learner's loop."""

    num_updates: int
    """Largest update chunk (``algo.agent.num_updates``)."""
    weight_publish_interval: int
    """Publish weights every this many updates."""
    max_ingest_per_iter: int
    """Slots taken per ring per drain."""
    idle_sleep_s: float
    """Sleep of a loop that ran no update."""
    logging_interval: int
    """gsteps between stats snapshots."""
    save_interval: int
    """gsteps between checkpoints (rank 0; 0 disables periodic checkpoints)."""
    ragged_ingest: bool = False
    """Ingest each ring into its own env block (the agent's buffer has one block per ring; Note
    [ragged ingest])."""
    compile_cpus: tuple[int, ...] | None = None
    """CPUs lent to the first update chunk, which compiles (its collectors wait meanwhile; Note
    [compile on borrowed CPUs]); None keeps the learner's own."""


@dataclass(frozen=True, kw_only=True)
class LearnerHooks:
    """How a learner sees the rest of the run (shared counters in a process, closures in tests)."""

    collector_steps: Callable[[], int]
    """Sum of every collector's steps (rank 0's reading drives the decision)."""
    collectors_finished: Callable[[], bool]
    """This rank's collectors reached their budget."""
    all_collectors_finished: Callable[[], bool] | None = None
    """Every collector of the run reached its budget (None: this rank's collectors are all of them)."""
    stop_requested: Callable[[], bool]
    """The parent asked to stop."""
    on_progress: Callable[[int, int], None] = lambda gstep, updates: None
    """Rank 0 publishes ``(global_step, updates)``."""
    on_snapshot: Callable[[LearnerSnapshot], object] = lambda snapshot: None
    """Send a stats snapshot (never blocks)."""
    checkpoint_path: Callable[[int], Path] | None = None
    """Rank 0: where the checkpoint of a gstep goes (None: no checkpoints)."""
    checkpoint_extra: Callable[[int], dict[str, object]] = lambda gstep: {}
    """Counters stored with a checkpoint."""


class Learner:
    """A learner rank: its agent, its rings and weight writers, and the lockstep decider.

    Args:
        rank: Learner rank.
        agent: The rank's agent (replay buffer of its collectors' envs).
        rings: Consumer ends of its collectors' rings, in collector order.
        writers: Weight writers of the same collectors.
        decider: The lockstep training decision.
        settings: Loop knobs.
        hooks: Counters and sinks.
        process_group: torch.distributed group when there are several learners.
        replay: Writes this rank's replay buffer (periodically from a thread, and at the end); None:
            never (Note [replay file] in ``fastsac_core._replay_file``).
    """

    def __init__(
        self,
        *,
        rank: int,
        agent: FastSACAgent,
        rings: Sequence[TransitionRing],
        writers: Sequence[WeightWriter],
        decider: TrainDecider,
        settings: LearnerSettings,
        hooks: LearnerHooks,
        process_group: torch.distributed.ProcessGroup | None = None,
        replay: ReplaySaver | None = None,
    ) -> None:
        self.rank = rank
        self.agent = agent
        self.decider = decider
        self.settings = settings
        self.hooks = hooks
        self.group = process_group
        self.replay = replay
        self.ingestor = Ingestor(
            rings, agent.buffer, settings.max_ingest_per_iter, ragged=settings.ragged_ingest
        )
        self.cadence = PublishCadence(settings.weight_publish_interval)
        self.timer = StageTimer(LEARNER_STAGES)
        self.device_timer = DeviceSpanTimer(agent.device)
        self.publisher = DeferredPublisher(writers, agent.device)
        self.gstep = 0
        self.updates = 0
        self.last_metrics: dict[str, Tensor] = {}
        self._flat = torch.empty(agent.actor_param_numel(), device=agent.device)
        self._window_start = time.perf_counter()
        self._window_updates = 0
        self._last_report = -1
        self._last_save = 0
        self._trained = False  # no update chunk run yet (the first one compiles and captures)
        self._pending_checkpoint: str | None = None
        self.stopped = False

    # ------------------------------------------------------------------ pieces of one iteration

    def drain(self) -> int:
        """Take every ring's new slots and ingest them (generations, or ragged per block); timed."""
        with self.timer.time("drain"):
            ingested = self.ingestor.drain()
        return ingested

    @property
    def version(self) -> int:
        """Version last handed to this rank's collectors."""
        return self.publisher.version

    def publish(self, *, wait: bool = False) -> int:
        """Snapshot the actor and normalizer for every collector of this rank; returns the version.

        On a GPU the snapshot reaches the writers once the updates before it have run (Note [Deferred
        publish]): at a later ``finish_publish`` or ``publish`` call, or now with ``wait=True``. The
        returned version is the last one handed over.
        """
        with self.timer.time("publish"):
            self.publisher.finish(block=True)  # the previous snapshot still reads self._flat
            if self.agent.world_size > 1:
                sync_normalizers(self.agent, self.group)
            flat = self.agent.flatten_actor_params(self._flat)
            extras = {**self.agent.policy_extras(), PUBLISHED_GSTEP: published_stamp(self.gstep)}
            self.publisher.begin(flat, extras)
            if wait:
                self.publisher.finish(block=True)
        return self.version

    def finish_publish(self, *, block: bool = False) -> None:
        """Hand a pending snapshot to the writers if it has landed (or wait for it with ``block``)."""
        if self.publisher.pending:
            with self.timer.time("publish"):
                self.publisher.finish(block=block)

    def _train(self, decision: Decision) -> None:
        for chunk in split_chunks(decision.run_updates, self.settings.num_updates):
            self.ingestor.wait_before_sampling()
            if self._trained:
                with self.timer.time("update"), self.device_timer.span():
                    self.last_metrics = self.agent.update(chunk)
            else:
                self._first_chunk(chunk)
            self.finish_publish()  # the previous snapshot, if the GPU got past it (never waits)
            self.updates += chunk
            self._window_updates += chunk
            if self.cadence.after(chunk):
                self.publish()
            self._maybe_drain()  # keep the rings moving between chunks (local, no collective)

    def _first_chunk(self, chunk: int) -> None:
        """The first update chunk, which compiles and captures: on lent CPUs, and say how long it took.

        With a background compile it runs the interim steps, which compile nothing: the compile thread
        borrows the CPUs instead (Note [compile on borrowed CPUs]).
        """
        started = time.perf_counter()
        lent = None if self.agent.execution.background else self.settings.compile_cpus
        with (
            borrowed_cpus(lent) as cpus,
            self.timer.time("update"),
            self.device_timer.span(),
        ):
            self.last_metrics = self.agent.update(chunk)
        self._trained = True
        _log.info(
            "learner%d: first update chunk (%d updates, compile and capture included) took %.2f s on %d CPUs",
            self.rank, chunk, time.perf_counter() - started, cpus,
        )  # fmt: skip

    def _maybe_drain(self) -> None:
        """Drain unless strict mode holds the collectors back (Note [strict back-pressure])."""
        if self.decider.should_ingest(self.agent.buffer.num_complete >= 1):
            self.drain()

    def _done(self) -> bool:
        ing = self.ingestor
        return self.hooks.collectors_finished() and ing.unread() == 0 and ing.held() == 0

    def resume_at(self, gstep: int, updates: int) -> None:
        """Continue a run from its checkpoint's global step and update count.

        The next periodic checkpoint is the next one due after ``gstep``, not one at ``gstep`` again.
        """
        self.gstep = self._last_save = self._last_report = gstep
        self.updates = updates

    def run_iteration(self) -> bool:
        """One loop: drain, one lockstep decision, the updates it grants; False once stopped."""
        if self.stopped:
            return False
        self._maybe_drain()
        # Rank 0's reading of the steps drives the decision, so it may vote done only once that reading
        # is final: read "every collector finished" first (counts only grow). Otherwise another rank's
        # collector could take its last step after the reading, that rank vote done, and the run stop
        # one generation short.
        all_finished = self.hooks.all_collectors_finished or self.hooks.collectors_finished
        final_reading = self.rank != 0 or all_finished()
        with self.timer.time("decide"):  # with several ranks: the collective, waits for the slowest
            decision = self.decider.step(
                collector_steps=self.hooks.collector_steps(),
                has_data=self.agent.buffer.num_complete >= 1,
                stop_vote=self.hooks.stop_requested(),
                done_vote=final_reading and self._done() and self.decider.owed == 0,
            )
        self.gstep = max(self.gstep, decision.gstep)
        if decision.run_updates:
            self._train(decision)
        elif not decision.stop:
            with self.timer.time("idle"):
                time.sleep(self.settings.idle_sleep_s)
        if self.rank == 0:
            self.hooks.on_progress(self.gstep, self.updates)
            self._maybe_checkpoint()
        self._maybe_save_replay()
        self.stopped = decision.stop
        if self.stopped:
            self.finish_publish(block=True)
            # Note [a stop keeps what was counted]: the slots the collectors pushed are in its gstep.
            with self.timer.time("drain"):
                self.ingestor.drain_rest()
        self._maybe_report()
        return not self.stopped

    # ------------------------------------------------------------------ checkpoints and stats

    def _maybe_checkpoint(self) -> None:
        interval = self.settings.save_interval
        if interval > 0 and self.gstep // interval > self._last_save // interval:
            self.checkpoint()

    def checkpoint(self) -> Path | None:
        """Rank 0: write a checkpoint now (after the in-flight ingest landed); its path."""
        if self.rank != 0 or self.hooks.checkpoint_path is None:
            return None
        with self.timer.time("checkpoint"):
            self.ingestor.wait_ingest()
            path = save_checkpoint(
                self.hooks.checkpoint_path(self.gstep),
                self.agent,
                extra={
                    "iteration": self.gstep,
                    "updates": self.updates,
                    "owed_updates": self.decider.owed,  # Note [a stop keeps what was counted]
                    **self.hooks.checkpoint_extra(self.gstep),
                },
            )
        self._last_save = self.gstep
        self._pending_checkpoint = str(path)
        _log.info("checkpoint %s", path)
        return path

    def _maybe_save_replay(self) -> None:
        """Every rank: hand a snapshot of its buffer to the replay writer thread when one is due."""
        if self.replay is not None and self.replay.due():
            with self.timer.time("checkpoint"):
                self.ingestor.wait_ingest()  # the snapshot holds every slot committed so far
                self.replay.maybe_save(self.agent.buffer, self.gstep)

    def save_replay(self) -> ReplayFileInfo | None:
        """Every rank: write its buffer now, after any write in flight (the end of a run); the file."""
        if self.replay is None:
            return None
        with self.timer.time("checkpoint"):
            self.ingestor.wait_ingest()
            return self.replay.save_now(self.agent.buffer, self.gstep)

    def snapshot(self) -> LearnerSnapshot:
        """This rank's stats over the window since the last snapshot (starts a new window)."""
        now = time.perf_counter()
        wall = max(now - self._window_start, 1e-9)
        metrics = {k: float(v) for k, v in self.last_metrics.items()} if self.rank == 0 else {}
        snap = LearnerSnapshot(
            rank=self.rank,
            global_step=self.gstep,
            updates=self.updates,
            updates_per_s=self._window_updates / wall,
            learn_pct=min(100.0, 100.0 * self._update_seconds() / wall),
            buffer_size=self.agent.buffer.num_stored,
            timing_ms=self.timer.means_ms(),
            host_pct=self.timer.shares_pct(wall),
            metrics=metrics,
            checkpoint=self._pending_checkpoint,
            compiled=self.agent.compiled,
        )
        self._pending_checkpoint = None
        self._window_start = now
        self._window_updates = 0
        self.timer.reset()
        return snap

    def _update_seconds(self) -> float:
        """Time in updates this window: on the GPU itself for a CUDA learner, else the host's."""
        if self.device_timer.enabled:
            return self.device_timer.collect()
        return self.timer.total_s("update")

    def _maybe_report(self) -> None:
        interval = max(1, self.settings.logging_interval)
        due = self.gstep // interval > self._last_report // interval
        if due or self._pending_checkpoint is not None or self.stopped:
            self._last_report = self.gstep
            self.hooks.on_snapshot(self.snapshot())


def run_learner_loop(
    learner: Learner,
    *,
    profile: int = 0,
    after_updates: int = PROFILE_AFTER_UPDATES,
    name: str = "learner",
    compile_wait_s: float = 5.0,
) -> None:
    """Run ``learner`` until it stops; profile ``profile`` iterations (0: none) after ``after_updates`` more.

    A background compile still running at the end is asked to stop and waited for up to
    ``compile_wait_s`` (Note [Compile in the background]).
    """
    start = learner.updates  # a resumed learner starts at its checkpoint's count
    try:
        while learner.run_iteration():
            if profile and learner.updates - start >= after_updates:
                if not profiled(learner, profile, name):
                    return
                profile = 0
    finally:
        learner.agent.close(timeout_s=compile_wait_s)
