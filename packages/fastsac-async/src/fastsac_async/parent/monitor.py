"""The parent's watch over a running run: boot barrier, monitor loop, and naming a failed worker.

:class:`RunWatch` waits for every worker's ready report (Note [engine lifecycle], step 2), then
forwards stats ticks and watches exits and stop requests until every learner is done (step 3); a
failure is named by Note [naming the failed worker].
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fastsac_async.control import Control
from fastsac_async.evaluator.loop import EvalReport
from fastsac_async.exceptions import BootTimeoutError, RunAborted, WorkerFailed
from fastsac_async.parent.stall import STALL_WARN_S, StallWatch
from fastsac_async.parent.supervisor import Supervisor, WorkerExit
from fastsac_async.run_layout import RunLayout
from fastsac_async.spec import EngineSpec
from fastsac_async.stats import CollectorSnapshot, CollectorSummary, LearnerSnapshot, aggregate_collectors
from shm_transport import HandshakeAborted, StartupHandshake

__all__ = ["EngineResult", "EngineStats", "RunWatch", "StopReason", "final_checkpoint"]

_log = logging.getLogger(__name__)

_MARKED_EXIT_WAIT_S = 2.0
"""Longest wait for a worker that marked its failure to exit, so its exit code can be named."""

_FINAL_SNAPSHOT_WAIT_S = 2.0
"""Longest wait, once every learner is done, for the snapshot that names the final checkpoint."""

_EVALUATOR_EXIT_WAIT_S = 5.0
"""Longest wait, once every learner is done, for the evaluator to stop (and its last report to arrive)."""


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
    evaluations: tuple[EvalReport, ...] = ()
    """Evaluations finished since the last tick, in order."""


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


class RunWatch:
    """The parent's watch over its workers once they are spawned.

    Args:
        spec: The resolved run.
        sup: The supervisor that spawned the workers.
        control: The run's shared counters.
        collectors: Collector worker names, by index.
        learners: Learner worker names, by rank.
    """

    def __init__(
        self,
        spec: EngineSpec,
        sup: Supervisor,
        control: Control,
        collectors: list[str],
        learners: list[str],
        evaluators: list[str] | None = None,
    ) -> None:
        self.spec = spec
        self.sup = sup
        self.control = control
        self._collectors = collectors
        self._learners = learners
        self._evaluators = evaluators or []

    def _worker_of_slot(self, slot: int) -> str:
        collectors = len(self._collectors)
        return self._collectors[slot] if slot < collectors else self._learners[slot - collectors]

    def first_failure(self, exits: list[WorkerExit], *, during_boot: bool = False) -> WorkerFailed | None:
        """The failed worker to name, if any (Note [naming the failed worker]); None while none failed.

        ``during_boot``: the workers have not all been released yet (the failure says so).

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
        sup, control = self.sup, self.control
        marks = control.failures()
        dead = [e for e in exits if e.exitcode != 0]
        signalled = [e for e in dead if e.exitcode is not None and e.exitcode < 0]
        if signalled:
            return sup.failure(signalled[0], during_boot=during_boot)
        if not marks:
            return sup.failure(dead[0], during_boot=during_boot) if dead else None
        name = self._worker_of_slot(min(marks, key=lambda slot: marks[slot]))
        control.request_stop()
        sup.join([name], time.monotonic() + _MARKED_EXIT_WAIT_S)
        later = [e for e in sup.new_exits() if e.exitcode is not None and e.exitcode < 0]
        if later:
            return sup.failure(later[0], during_boot=during_boot)
        return sup.failure(WorkerExit(name, sup.exitcode(name)), during_boot=during_boot)

    def boot(
        self,
        handshake: StartupHandshake,
        on_boot: Callable[[str, str], None],
        should_stop: Callable[[], bool],
    ) -> None:
        """Wait for every worker's ready report, watching for deaths, then release them together.

        Raises:
            WorkerFailed: A worker exited before every worker was ready.
            BootTimeoutError: Not every worker was ready within ``boot_timeout_s``.
            HandshakeAborted: ``should_stop()`` turned true first.
        """
        sup = self.sup
        deadline = time.monotonic() + self.spec.options.boot_timeout_s
        dead: list[WorkerFailed] = []

        def abort() -> bool:
            exits = sup.new_exits()
            failure = self.first_failure(exits, during_boot=True)
            if failure is None and exits:  # any exit before ready fails the boot, a clean one too
                failure = sup.failure(exits[0], during_boot=True)
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
                sup.alive(), self.spec.options.boot_timeout_s, self.spec.run.layout.logs
            ) from exc
        handshake.release()
        for name in sup.names:
            on_boot(name, "running")

    def monitor(
        self,
        stats_queues: list[Any],
        on_stats: Callable[[EngineStats], None],
        should_stop: Callable[[], bool],
        should_abort: Callable[[], bool],
    ) -> EngineResult:
        """Forward stats ticks until every learner is done; stop on request or at the time limit.

        Raises:
            WorkerFailed: A worker failed (Note [naming the failed worker]) or a learner exited early.
            RunAborted: ``should_abort()`` turned true before every learner was done.
        """
        spec, sup, control = self.spec, self.sup, self.control
        start = time.monotonic()
        learners: dict[int, LearnerSnapshot] = {}
        collectors: dict[int, CollectorSnapshot] = {}
        reported: list[str] = []  # checkpoints named by rank 0's snapshots, in order
        evaluations: list[EvalReport] = []  # finished since the last tick
        last_checkpoint: str | None = None
        stopped_early = False
        stop_reason: StopReason = "completed"
        stall = StallWatch(STALL_WARN_S)

        def tick(checkpoint: str | None) -> None:
            on_stats(
                EngineStats(
                    elapsed_s=time.monotonic() - start,
                    global_step=control.global_step,
                    collector_steps=control.all_collector_steps(),
                    updates=control.updates,
                    learners=dict(learners),
                    collectors=dict(collectors),
                    summary=aggregate_collectors(list(collectors.values())),
                    checkpoint=checkpoint,
                    evaluations=tuple(evaluations),
                )
            )
            evaluations.clear()

        def forward() -> None:
            """Take every queued snapshot; a tick for each of rank 0."""
            for item in _drain(stats_queues):
                if isinstance(item, CollectorSnapshot):
                    collectors[item.index] = item
                elif isinstance(item, EvalReport):
                    evaluations.append(item)
                elif isinstance(item, LearnerSnapshot):
                    learners[item.rank] = item
                    if item.checkpoint:
                        reported.append(item.checkpoint)
                    if item.rank == 0:
                        tick(item.checkpoint)

        while True:
            sup.wait(0.05)
            exits = sup.new_exits()
            failure = self.first_failure(exits)
            if failure is not None:
                raise failure
            for exit_ in exits:
                if exit_.name in self._learners and not control.learner_done(int(exit_.name[7:])):
                    raise sup.failure(exit_)  # exited 0 before its loop was done
            forward()
            steps = control.all_collector_steps()
            # Watched while the run should move: not once a stop is asked for or the collectors have
            # their budget (the final checkpoint and replay write take their time then).
            if not control.stop_requested and min(steps) < spec.run.num_iterations:
                stalled = stall.check((*steps, control.updates))
                if stalled is not None:
                    sup.dump_stacks()
                    _log.warning(
                        "nothing has moved for %.0f s (no env step, no update): a first compile still "
                        "running, or a worker stuck (an env step that never returns?); every worker's "
                        "stack is now in its log (%s)", stalled, RunLayout(spec.run.run_dir).logs,
                    )  # fmt: skip
            if all(control.learner_done(r) for r in range(spec.num_learners)):
                # Done, final checkpoint included: an abort from here on only hurries the shutdown.
                control.request_stop()  # the evaluator abandons its evaluation (or reports a finished one)
                last_checkpoint = final_checkpoint(spec.run.run_dir, control, reported, forward, should_abort)
                deadline = time.monotonic() + _EVALUATOR_EXIT_WAIT_S
                while sup.alive(self._evaluators) and time.monotonic() < deadline and not should_abort():
                    sup.wait(0.02)
                forward()  # an exited worker's queue holds all it sent
                if evaluations:  # finished after rank 0's last snapshot: one more tick, at the same step
                    tick(None)
                break
            if should_abort():
                _log.warning("stopping at once: no final checkpoint")
                raise RunAborted(f"stopped at once at global step {control.global_step}: no final checkpoint")
            over_time = spec.run.time_limit_s is not None and time.monotonic() - start > spec.run.time_limit_s
            if not control.stop_requested and (over_time or should_stop()):
                stop_reason = "time_limit" if over_time else "stop_requested"
                _log.info("%s; learners finish with a checkpoint", stop_reason.replace("_", " "))
                control.request_stop()
                stopped_early = True
        if stop_reason == "completed" and control.global_step < spec.run.num_iterations:
            # Ended short of its budget on another host's stop (its learners voted it in the collective):
            # that is a stop asked for, not a completed run (a requeue reads the reason).
            stop_reason = "stop_requested"
            _log.info("stopped before the budget by another host's stop")
        return EngineResult(
            global_step=control.global_step,
            collector_steps=control.all_collector_steps(),
            updates=control.updates,
            stopped_early=stopped_early,
            stop_reason=stop_reason,
            last_checkpoint=last_checkpoint,
            elapsed_s=time.monotonic() - start,
        )


def final_checkpoint(
    run_dir: Path,
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
    final = str(RunLayout(run_dir).checkpoint(step))
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
