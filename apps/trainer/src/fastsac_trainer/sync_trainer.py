"""The synchronous trainer: step every env, ingest, update, repeat, in one process.

It is the reference the asynchronous trainer is compared with: the same agent, buffer and
metrics, with no concurrency. One iteration:

1. choose actions for the whole batch: uniform random for the first ``learning_starts`` iterations,
   then the agent's stochastic policy (``agent.act``);
2. step every env (``BatchedEnv.step``, auto-reset);
3. ingest: ``agent.buffer.extend`` the obs *before* the step with the action, reward,
   terminated and truncated flags (the buffer derives next obs from the next slot);
4. run the updates due (``fastsac_core.updates_due``, the asynchronous learner's rule: ``num_updates``
   per iteration from the one that completes ``learning_starts`` batches on, Note [updates due]); an
   iteration whose buffer holds no complete transition yet keeps its updates for the next one;
5. when due, a deterministic evaluation (``fastsac_trainer.sync_eval``), inline.

Seeds: envs use ``plan.run.seed`` (like collector 0 of the async trainer), torch/numpy/python use
``plan.run.seed + 1000`` (like learner rank 0).

# Note [exact sync resume]
A checkpoint holds the agent, its optimizers, normalizers, reward scale, counters and RNG states; the
replay file (``RunLayout.replay(0)``, Note [replay file] in ``fastsac_core._replay_file``) holds the
buffer, each env's running return and the envs' state (Note [env state] in the MuJoCo env), all taken
at an iteration boundary. A resume whose replay file was written at the checkpoint's iteration (every
stop writes both there) continues every episode where it was: the run then ends bit-identical to one
that never stopped. Otherwise (an older or newer replay file, an env that cannot save its state) the
buffer comes back, its newest step becomes a time-limit cut (``ReplayBuffer.cut_episodes``) and the
envs restart their episodes; with ``save_replay`` off (or no file) learning restarts from an empty
buffer. Episode statistics of the console (``rollout/*``) restart with each launch: they never
touch training.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fastsac_async import RunLayout, StopReason
from fastsac_core import (
    F32,
    BatchedEnv,
    CheckpointError,
    EnvCall,
    EnvCallError,
    FastSACAgent,
    ReplayBuffer,
    ReplaySaver,
    ResumableEnv,
    check_reset,
    check_step,
    learning_started,
    load_checkpoint,
    load_replay,
    save_checkpoint,
    step_transition,
    updates_due,
)
from fastsac_trainer._episode_stats import EpisodeStats
from fastsac_trainer.boot_clock import BootClock
from fastsac_trainer.config.exceptions import EnvError
from fastsac_trainer.plan import RunPlan
from fastsac_trainer.reporting import EvalLog, Reporter, Snapshot, replay_reuse, time_left
from fastsac_trainer.sync_eval import InlineEvaluation

__all__ = ["SyncResult", "run_sync"]

log = logging.getLogger(__name__)

_STAGES = ("inference", "env_step", "ingest", "update")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SyncResult:
    """How a synchronous run ended."""

    iterations: int
    """Iterations done, counted from the start of the run (a resumed run includes the earlier ones)."""
    env_steps: int
    """Transitions collected (iterations * ``RunPlan.env_steps_per_iteration``)."""
    updates: int
    """Critic updates done by the agent (cumulative over resumes)."""
    mean_return: float | None
    """Mean return of the last 100 episodes of this launch (a resume starts afresh); None when none ended."""
    last_checkpoint: Path | None
    """The last checkpoint written (or resumed from); None when none exists."""
    stop_reason: StopReason
    """Why the loop ended."""


class _Interval:
    """Sums of one logging interval: wall time per stage, iterations, updates, train metrics."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.stage_s = dict.fromkeys(_STAGES, 0.0)
        self.iterations = 0
        self.updates = 0
        self.metric_sums: dict[str, Tensor] = {}
        self.metric_count = 0

    def add_metrics(self, metrics: dict[str, Tensor]) -> None:
        """Accumulate detached metric tensors on their device (no host sync)."""
        for key, value in metrics.items():
            self.metric_sums[key] = self.metric_sums[key] + value if key in self.metric_sums else value
        self.metric_count += 1


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _choose_actions(env: BatchedEnv, agent: FastSACAgent, obs: np.ndarray, explore: bool) -> np.ndarray:
    if explore:
        with EnvCall(env, "sample_actions"):  # only while exploring: one small object a step
            return env.sample_actions()
    actions: np.ndarray = agent.act(torch.from_numpy(obs)).to("cpu").numpy()
    return actions


def _resume(plan: RunPlan, agent: FastSACAgent) -> tuple[int, float]:
    """Load ``plan.run.resume_from`` into ``agent``; return (iteration, elapsed_s) it was saved at."""
    assert plan.run.resume_from is not None
    extra = load_checkpoint(plan.run.resume_from, agent)
    if "iteration" not in extra:
        raise CheckpointError(
            f"checkpoint {str(plan.run.resume_from)!r} has no trainer counters (extra={sorted(extra)});"
            " resume from a checkpoint written by the trainer"
        )
    log.info("resumed from %s at iteration %d", plan.run.resume_from, extra["iteration"])
    return int(extra["iteration"]), float(extra.get("elapsed_s", 0.0))


def _start_envs(plan: RunPlan, agent: FastSACAgent, env: BatchedEnv, iteration: int) -> tuple[F32, F32]:
    """Restore a resume's replay file into ``agent.buffer``; continue or reset the envs.

    See Note [exact sync resume]. The envs' calls go through ``fastsac_core.EnvCall``.
    """
    source = plan.run.replay_to_resume(0)
    if source is None or not source.is_file():
        if plan.run.resume_from is not None:
            why = "algo.trainer.save_replay=false" if source is None else f"no {source.name} beside it"
            log.info("learning restarts from an empty replay buffer (%s)", why)
        return _reset(env)
    try:
        info = load_replay(source, agent.buffer)
    except CheckpointError as exc:
        log.warning("%s; learning restarts from an empty replay buffer", exc)
        return _reset(env)
    state = info.extra.get("env")
    exact = info.gstep == iteration and state is not None and isinstance(env, ResumableEnv)
    log.info(
        "replay buffer restored from %s: %d transitions of iteration %d; %s",
        source, info.transitions, info.gstep,
        "the episodes continue" if exact else "the episodes restart",
    )  # fmt: skip
    if exact:
        assert isinstance(env, ResumableEnv) and state is not None
        with EnvCall(env, "restore_state"):
            return env.restore_state(state)
    agent.buffer.cut_episodes()
    return _reset(env)


def _reset(env: BatchedEnv) -> tuple[F32, F32]:
    with EnvCall(env, "reset"):
        return env.reset()


def _stopped_by_env(layout: RunLayout, error: EnvCallError) -> EnvError:
    """The run's end by an env's own exception: its line, and the file its traceback was written to.

    The line is ``fastsac_core.EnvCall``'s (``env_raised``), as an asynchronous collector says it, from
    a training env's call or an evaluation's. The traceback goes to ``async_errors/trainer_error.log``
    of the run (where a worker's would be), and the run stops as a worker's failure stops an
    asynchronous one.
    """
    path = layout.error_log("trainer")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(traceback.format_exception(error)), encoding="utf-8")
    return EnvError(f"{error}; the run stopped (traceback: {path})")


def _env_state(env: BatchedEnv) -> dict[str, object]:
    """What the replay file keeps of the envs: their state when they can save it (Note [env state])."""
    state = env.save_state() if isinstance(env, ResumableEnv) else None
    return {} if state is None else {"env": state}


def _snapshot(
    plan: RunPlan,
    iteration: int,
    elapsed_s: float,
    interval: _Interval,
    episodes: EpisodeStats,
    learning: bool,
    time_left_s: float | None = None,
    compiled: bool = False,
) -> Snapshot:
    wall = max(time.perf_counter() - interval.start, 1e-9)
    its = max(interval.iterations, 1)
    stage_ms = {name: 1000.0 * s / its for name, s in interval.stage_s.items()}
    scalars = {
        "perf/env_steps_per_s": interval.iterations * plan.env_steps_per_iteration / wall,
        "perf/updates_per_s": interval.updates / wall,
        "perf/learn_pct": 100.0 * interval.stage_s["update"] / wall,
        "perf/collect_ms_per_batch": stage_ms["inference"] + stage_ms["env_step"],
        "async/utd": interval.updates / its,
        "perf/compiled": float(compiled),  # the compiled update steps run (Note [Compile in the background])
    }
    scalars["async/reuse"] = replay_reuse(
        scalars["perf/updates_per_s"], plan.agent.batch_size, scalars["perf/env_steps_per_s"]
    )
    if episodes.mean_return is not None and episodes.mean_length is not None:
        scalars["rollout/mean_return"] = episodes.mean_return
        scalars["rollout/mean_ep_len"] = episodes.mean_length
    if interval.metric_count:
        keys = sorted(interval.metric_sums)
        # The one host sync of a logging interval.
        values = (
            torch.stack([interval.metric_sums[k].float() for k in keys]) / interval.metric_count
        ).tolist()
        scalars.update({f"train/{k}": v for k, v in zip(keys, values, strict=True)})
    return Snapshot(
        iteration=iteration,
        env_steps=iteration * plan.env_steps_per_iteration,
        total_env_steps=plan.run.num_iterations * plan.env_steps_per_iteration,
        elapsed_s=elapsed_s,
        scalars=scalars,
        timing={"sync": stage_ms},
        warming_up=not learning,
        time_left_s=time_left_s,
    )


def run_sync(
    plan: RunPlan, reporter: Reporter, *, should_stop: Callable[[], bool] = lambda: False
) -> SyncResult:
    """Train ``plan`` with the synchronous loop until its budget, time limit or ``should_stop()``.

    Reports a :class:`Snapshot` every ``plan.run.logging_interval`` iterations (and once at the end),
    checkpoints every ``plan.run.save_interval`` iterations and always at the end; writes the replay
    file every ``plan.run.replay_save_interval_s`` seconds (from a thread) and at the end.

    Args:
        plan: The resolved run.
        reporter: Where snapshots and checkpoint notices go (not closed here).
        should_stop: Polled once per iteration; True ends the run with a final checkpoint.

    Returns:
        Counters and the last checkpoint of the run.
    """
    cfg, run = plan.agent, plan.run  # never compiling in the background (config.resolve)
    _seed_everything(run.seed + 1000)
    buffer = ReplayBuffer.of(run.dims, cfg, plan.num_envs, device=plan.device)
    agent = FastSACAgent(run.dims, cfg, plan.device, buffer=buffer)
    iteration, elapsed_before = _resume(plan, agent) if run.resume_from is not None else (0, 0.0)
    last_checkpoint = run.resume_from
    cuda = agent.device.type == "cuda"

    env = run.env_factory(plan.num_envs, run.seed)
    replay = ReplaySaver(run.replay_path(0), run.replay_save_interval_s)
    start_iteration = iteration
    episodes = EpisodeStats(100)
    stop_reason: StopReason = "completed"
    settings = plan.run.evaluation
    evaluation = None if settings is None else InlineEvaluation(plan, settings, iteration)
    evals = EvalLog(reporter, clip_log=plan.run.layout.parent_log)
    report = evals.report

    stepping = EnvCall(env, "step")  # what the envs' own code raises leaves as one line (below)
    clock = BootClock(
        expected=("first update", "compiled switch"),
        profile=(plan.run.layout.boot_profile("trainer"), "first update"),
    )
    try:
        obs, critic_obs = _start_envs(plan, agent, env, iteration)
        check_reset(env, obs, critic_obs)
        # The protocol keeps step arrays valid only until the next step, so the pre-step obs the
        # buffer needs is copied (~10 µs) rather than relied on (MujocoBatchedEnv would keep it).
        held_obs = np.empty_like(obs)
        held_critic_obs = held_obs if critic_obs is obs else np.empty_like(critic_obs)
        start = time.perf_counter()
        interval = _Interval()
        last_reported = last_saved = iteration
        owed = 0  # updates due and not yet run (no complete transition to sample yet)

        def report_interval(elapsed: float) -> None:
            learning = agent.update_idx > 0
            left = time_left(run.time_limit_s, elapsed - elapsed_before)
            report(_snapshot(plan, iteration, elapsed, interval, episodes, learning, left, agent.compiled))

        log.info("sync training %s from iteration %d to %d", plan.task_name, iteration, run.num_iterations)
        while iteration < run.num_iterations:
            if should_stop():
                stop_reason = "stop_requested"
                break
            if run.time_limit_s is not None and time.perf_counter() - start >= run.time_limit_s:
                stop_reason = "time_limit"
                break

            t0 = time.perf_counter()
            explore = not learning_started(iteration, cfg.learning_starts)
            actions = _choose_actions(env, agent, obs, explore=explore)
            np.copyto(held_obs, obs)
            if held_critic_obs is not held_obs:
                np.copyto(held_critic_obs, critic_obs)
            t1 = time.perf_counter()
            with stepping:
                result = env.step(actions)
            check_step(env, result)
            t2 = time.perf_counter()
            held = (torch.from_numpy(held_obs), torch.from_numpy(held_critic_obs), torch.from_numpy(actions))
            agent.buffer.extend(step_transition(*held, result))
            episodes.add(result.episode_returns, result.episode_lengths)
            obs, critic_obs = result.obs, result.critic_obs
            t3 = time.perf_counter()
            iteration += 1
            owed += updates_due(
                iteration,
                paid_gstep=iteration - 1,
                learning_starts=cfg.learning_starts,
                num_updates=cfg.num_updates,
            )
            if owed and agent.buffer.num_complete >= 1:
                # Owed updates run in calls of num_updates, as the learner's chunks do.
                for _ in range(owed // cfg.num_updates):
                    interval.add_metrics(agent.update(cfg.num_updates))
                interval.updates += owed
                owed = 0
                if cuda:
                    # The next act() waits for these updates anyway; syncing here only moves that
                    # wait into the "update" stage so the timing tree is honest.
                    torch.cuda.synchronize(agent.device)
                clock.mark("first update")
                if agent.compiled:
                    clock.mark("compiled switch")
            t4 = time.perf_counter()
            for name, seconds in zip(_STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                interval.stage_s[name] += seconds
            interval.iterations += 1
            point = None if evaluation is None else evaluation.maybe_evaluate(iteration, agent, should_stop)
            if point is not None:
                evals.add(point)

            if iteration % run.logging_interval == 0:
                elapsed = elapsed_before + time.perf_counter() - start
                report_interval(elapsed)
                interval, last_reported = _Interval(), iteration
            if iteration % run.save_interval == 0:
                last_checkpoint = _save(plan, agent, iteration, elapsed_before + time.perf_counter() - start)
                reporter.checkpoint_saved(last_checkpoint)
                last_saved = iteration
            replay.maybe_save(agent.buffer, iteration, lambda: _env_state(env))

        elapsed = elapsed_before + time.perf_counter() - start
        if iteration != last_reported:
            report_interval(elapsed)
        if iteration != last_saved or last_checkpoint is None:
            last_checkpoint = _save(plan, agent, iteration, elapsed)
            reporter.checkpoint_saved(last_checkpoint)
        if iteration > start_iteration:  # the buffer of the final checkpoint, with the envs' state
            replay.save_now(agent.buffer, iteration, lambda: _env_state(env))
    except EnvCallError as error:  # a training env's call or an evaluation's (evaluate_policy)
        raise _stopped_by_env(plan.run.layout, error) from error
    finally:
        agent.close()  # a background compile still running (Note [Compile in the background])
        replay.wait()
        env.close()
        clock.close()  # a start-up profile of a run that ended before its first update
    clock.finish()
    log.info("sync training ended (%s) at iteration %d", stop_reason, iteration)
    return SyncResult(
        iterations=iteration,
        env_steps=iteration * plan.env_steps_per_iteration,
        updates=agent.update_idx,
        mean_return=episodes.mean_return,
        last_checkpoint=last_checkpoint,
        stop_reason=stop_reason,
    )


def _save(plan: RunPlan, agent: FastSACAgent, iteration: int, elapsed_s: float) -> Path:
    extra = {
        "iteration": iteration,
        "env_steps": iteration * plan.env_steps_per_iteration,
        "elapsed_s": elapsed_s,
        "task": plan.task_name,
        "trainer": "sync",
    }
    return save_checkpoint(plan.run.layout.checkpoint(iteration), agent, extra=extra)
