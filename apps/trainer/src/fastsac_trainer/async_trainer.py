"""The asynchronous trainer: RunPlan -> topology -> fastsac-async engine -> Snapshots.

Takes the plan's placement (or resolves it, ``fastsac_trainer.config.placement.resolve_placement``), runs
:func:`fastsac_async.run_engine`, and turns each engine stats tick into a :class:`Snapshot` with
the metric names of DESIGN.md. Worker failures reach the boot view (during start-up) and the
caller (as :class:`fastsac_async.WorkerFailed`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import torch

from fastsac_async import (
    BootTimeoutError,
    EngineResult,
    EngineSpec,
    EngineStats,
    EvalReport,
    StopReason,
    WorkerFailed,
    evaluator_name,
    run_engine,
)
from fastsac_core import learning_started
from fastsac_trainer.boot_clock import BootClock
from fastsac_trainer.config.placement import resolve_placement
from fastsac_trainer.plan import RunPlan
from fastsac_trainer.reporting import EvalLog, EvalPoint, Reporter, Snapshot, replay_reuse, time_left

__all__ = ["AsyncResult", "BootView", "engine_snapshot", "eval_point", "run_async"]

log = logging.getLogger(__name__)


class BootView(Protocol):
    """Receives worker states during boot (the console's ``fastsac_trainer.console.BootView`` fits)."""

    def worker_state(self, name: str, state: str) -> None:
        """Worker ``name`` is now ``state`` (booting, ready, running)."""
        ...

    def failed(self, name: str, reason: str, log_path: Path | None, *, during_boot: bool = True) -> None:
        """Worker ``name`` failed for ``reason`` (during start-up or not); its error log: ``log_path``."""
        ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class AsyncResult:
    """How an asynchronous run ended."""

    iterations: int
    """Global step reached (full env batches)."""
    env_steps: int
    """Transitions collected (sum of collector steps × envs per collector)."""
    updates: int
    """Updates run by learner 0."""
    collector_steps: list[int]
    """Steps of every collector."""
    last_checkpoint: Path | None
    """The last checkpoint written."""
    stop_reason: StopReason
    """``completed``, ``time_limit`` or ``stop_requested`` (Ctrl+C, should_stop)."""


def run_steps_per_host_step(plan: RunPlan) -> int:
    """The run's env steps per env step of this host: its collectors' counts stand for every host's.

    Every host runs as many collectors of as many envs, in lockstep with the others (their counts
    differ by at most a collector's lead), so the run's env steps and rate are this host's scaled by
    the one rule, :attr:`RunPlan.env_steps_per_iteration` over this host's ``num_envs``; the
    collectors' own per-collector figures stay this host's.
    """
    return plan.env_steps_per_iteration // plan.num_envs


def engine_snapshot(
    plan: RunPlan, stats: EngineStats, envs_per_collector: int, previous: EngineStats | None = None
) -> Snapshot:
    """A :class:`Snapshot` with DESIGN.md's metric names from one engine stats tick.

    ``envs_per_collector`` turns one collector step into the run's env steps (this host's envs per
    collector scaled to the run's, :func:`run_steps_per_host_step`). ``previous`` is the tick of the
    previous snapshot: the scalars of a source that has not reported since are the snapshot's
    ``stale`` ones (:func:`stale_scalars`).
    """
    s = stats.summary
    learners = list(stats.learners.values())
    collected: dict[str, float] = {  # from the collectors' latest snapshots
        "perf/env_steps_per_s": s.steps_per_s * run_steps_per_host_step(plan),
        "async/policy_lag": float(s.max_policy_lag),
        "async/ring_fill": float(s.ring_fill),
        "async/weight_version": float(s.weight_version),
    }
    if s.timing_ms:
        collected["perf/collect_ms_per_batch"] = sum(
            v for k, v in s.timing_ms.items() if k in ("env_step", "inference")
        )
    collected.update({f"perf/collector_{k}_ms": v for k, v in s.timing_ms.items()})
    collected.update({f"perf/collector_{k}_pct": v for k, v in s.time_pct.items()})
    if len(stats.collectors) > 1:
        collected.update({f"async/{k}": v for k, v in s.per_collector.items() if not k.startswith("env_")})
    if s.mean_return is not None:
        collected["rollout/mean_return"] = s.mean_return
    if s.mean_ep_len is not None:
        collected["rollout/mean_ep_len"] = s.mean_ep_len
    scalars: dict[str, float] = {
        "perf/updates_per_s": stats.learners[0].updates_per_s if 0 in stats.learners else 0.0,
        "perf/learn_pct": sum(x.learn_pct for x in learners) / max(1, len(learners)),
        "async/utd": stats.updates / max(1, stats.global_step),
        **collected,
    }
    scalars["async/reuse"] = replay_reuse(
        scalars["perf/updates_per_s"], plan.agent.batch_size, scalars["perf/env_steps_per_s"]
    )
    if 0 in stats.learners:
        scalars["perf/compiled"] = float(stats.learners[0].compiled)  # Note [Compile in the background]
        scalars.update({f"train/{k}": v for k, v in stats.learners[0].metrics.items()})
        scalars.update({f"perf/learner_{k}_pct": v for k, v in stats.learners[0].host_pct.items()})
    timing = {f"collector{i}": dict(c.timing_ms) for i, c in sorted(stats.collectors.items())}
    timing.update({f"learner{r}": dict(x.timing_ms) for r, x in sorted(stats.learners.items())})
    env_steps = sum(stats.collector_steps) * envs_per_collector
    return Snapshot(
        iteration=stats.global_step,
        env_steps=env_steps,
        total_env_steps=plan.run.num_iterations * plan.env_steps_per_iteration,
        elapsed_s=stats.elapsed_s,
        scalars=scalars,
        timing=timing,
        warming_up=not learning_started(stats.global_step, plan.agent.learning_starts),
        time_left_s=time_left(plan.run.time_limit_s, stats.elapsed_s),
        stale=stale_scalars(scalars, set(collected), stats, previous),
    )


_ENGINE_COUNTED = frozenset({"async/utd"})
"""Scalars of the engine's own counters (never stale)."""


def stale_scalars(
    scalars: dict[str, float], collected: set[str], stats: EngineStats, previous: EngineStats | None
) -> frozenset[str]:
    """The ``scalars`` of a source that has not reported between the ``previous`` tick and ``stats``.

    Three sources: the collectors (``collected``, the scalars of their snapshots: stale when no
    collector's step count moved), learner 0 (every other scalar but the engine's counters: stale
    when its snapshot is the previous one, same step and updates) and its updates (``train/*``: stale
    when it ran none). ``async/reuse`` is of both the collectors and learner 0.
    """
    if previous is None:
        return frozenset()
    stale: set[str] = set()
    if {i: c.steps for i, c in stats.collectors.items()} == {
        i: c.steps for i, c in previous.collectors.items()
    }:
        stale |= collected | {"async/reuse"}
    now, before = stats.learners.get(0), previous.learners.get(0)
    mark = (now.global_step, now.updates) if now is not None else None
    if mark is None or (before is not None and mark == (before.global_step, before.updates)):
        stale |= set(scalars) - collected - _ENGINE_COUNTED
    if now is None or (before is not None and now.updates == before.updates):
        stale |= {k for k in scalars if k.startswith("train/")}
    return frozenset(stale & set(scalars))


def eval_point(report: EvalReport, env_steps_per_iteration: int) -> EvalPoint:
    """The app's record of one evaluation (its env steps: the publish step's env batches, every host's)."""
    return EvalPoint(
        iteration=report.global_step,
        env_steps=report.global_step * env_steps_per_iteration,
        mean_return=report.mean_return,
        mean_length=report.mean_length,
        best_return=report.best_return,
        seconds=report.seconds,
        video=None if report.video is None else Path(report.video),
        video_error=report.video_error,
    )


def run_async(
    plan: RunPlan,
    reporter: Reporter,
    *,
    should_stop: Callable[[], bool],
    boot_view: BootView | None = None,
    should_abort: Callable[[], bool] = lambda: False,
    force_abort: Callable[[], bool] = lambda: False,
) -> AsyncResult:
    """Train ``plan`` with collector and learner processes; report to ``reporter``.

    Args:
        plan: The validated run.
        reporter: Console/TensorBoard sink.
        should_stop: Polled; True stops cleanly (rank 0 writes a final checkpoint).
        boot_view: Receives worker states during boot and the failing worker.
        should_abort: Polled, also while stopping; True stops at once (no final checkpoint), once no
            learner's final replay write holds the stop (Note [a stop waits for the replay write]).
        force_abort: Polled likewise; True stops at once, held by nothing (a second signal).

    Raises:
        fastsac_async.WorkerFailed: A worker died; the message names it, its exit status and its
            error log (also passed to ``boot_view.failed``).
        fastsac_async.RunAborted: ``should_abort()`` or ``force_abort()`` turned true; every worker
            is gone.
    """
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    topology = plan.topology
    if topology is None:  # not resolved (and printed, its notes included) before the run folder was made
        topology = resolve_placement(plan, plan.run.dims, cuda_count)
        for note in topology.notes:
            log.info("placement: %s", note)
    spec = EngineSpec(
        run=plan.run, agent=plan.agent, options=plan.async_options, topology=topology, hosts=plan.hosts
    )
    per_collector = topology.num_envs_per_collector * run_steps_per_host_step(plan)  # the run's env steps

    reported_step = -1
    reported: EngineStats | None = None  # the tick of the last snapshot reported
    evals = EvalLog(reporter, clip_log=plan.run.layout.log(evaluator_name()))
    clock = BootClock(
        expected=("workers started", "workers running", "first update", "compiled switch"),
        profile=(plan.run.layout.boot_profile("trainer"), "workers running"),
    )

    def on_stats(stats: EngineStats) -> None:
        # One report per global step, the step the snapshot is labelled with: the learner reports its
        # last window when it stops, then sends one more tick at the same step for the final checkpoint
        # (an empty window: 0 updates/s), and the engine one more for evaluations that finished after
        # that; and a tick whose learner is one step behind the engine's step is labelled with the
        # engine's, so keying on the learner's step printed "it N" twice. Evaluations go out every tick.
        nonlocal reported_step, reported
        if stats.updates > 0:
            clock.mark("first update")
            if 0 in stats.learners and stats.learners[0].compiled:
                clock.mark("compiled switch")
        for report in stats.evaluations:
            evals.add(eval_point(report, plan.env_steps_per_iteration))
        step = stats.global_step
        if step != reported_step:
            reported_step = step
            evals.report(engine_snapshot(plan, stats, per_collector, reported))
            reported = stats
        if stats.checkpoint is not None:
            reporter.checkpoint_saved(Path(stats.checkpoint))

    def on_boot(worker: str, state: str) -> None:
        if state == "booting":  # forked: the trainer's own start and the fork server's imports are behind
            clock.mark("workers started")
        if state == "running":  # every worker is ready and released at once
            clock.mark("workers running")
        if boot_view is not None:
            boot_view.worker_state(worker, state)

    try:
        result: EngineResult = run_engine(spec, on_stats, on_boot, should_stop, should_abort, force_abort)
        clock.finish()  # the milestones reached, if the run ended before the compiled switch
    except WorkerFailed as failure:
        if boot_view is not None:
            boot_view.failed(
                failure.worker, failure.reason, failure.error_log, during_boot=failure.during_boot
            )
        raise
    except BootTimeoutError as failure:
        if boot_view is not None:
            for worker in failure.waiting_for:
                boot_view.failed(worker, "did not report ready", None, during_boot=True)
        raise
    finally:
        clock.close()  # a start-up profile of a run that failed or stopped before its workers ran
    return AsyncResult(
        iterations=result.global_step,
        env_steps=sum(result.collector_steps) * per_collector,
        updates=result.updates,
        collector_steps=result.collector_steps,
        last_checkpoint=Path(result.last_checkpoint) if result.last_checkpoint else None,
        stop_reason=result.stop_reason,
    )
