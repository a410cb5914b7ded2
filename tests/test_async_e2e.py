"""End to end: the asynchronous trainer on a real MuJoCo task, on CPU, through the app adapter."""

import os
from pathlib import Path

import pytest

from fastsac_async import (
    AsyncOptions,
    CollectorSnapshot,
    EngineStats,
    LearnerSnapshot,
    RunLayout,
    TrainingRun,
)
from fastsac_async.stats import aggregate_collectors
from fastsac_core import FastSACConfig, peek_checkpoint
from fastsac_trainer.async_trainer import engine_snapshot, run_async
from fastsac_trainer.plan import RunPlan
from fastsac_trainer.tasks import MujocoEnvFactory, probe_dims
from fastsac_trainer.testing import RecordingReporter
from shm_transport import list_segments


class Boot:
    def __init__(self) -> None:
        self.states: list[tuple[str, str]] = []

    def worker_state(self, name: str, state: str) -> None:
        self.states.append((name, state))

    def failed(self, name: str, reason: str, log_path: Path | None, *, during_boot: bool = True) -> None:
        self.states.append((name, "failed"))


def _plan(tmp_path: Path, learners: int, iterations: int = 30) -> RunPlan:
    factory = MujocoEnvFactory(env_id="HalfCheetah-v5", max_episode_steps=20)
    agent = FastSACConfig(
        actor_hidden_dim=32, critic_hidden_dim=32, num_atoms=11, batch_size=16, buffer_size=64,
        num_updates=2, learning_starts=5, compile=False, cudagraphs=False, amp=False,
    )  # fmt: skip
    run = TrainingRun(env_factory=factory, dims=probe_dims(factory), seed=1, num_iterations=iterations,
                      time_limit_s=None, logging_interval=5, save_interval=10, run_dir=tmp_path)  # fmt: skip
    return RunPlan(
        task_name="halfcheetah", run=run, num_envs=4, agent=agent,
        async_options=AsyncOptions(num_collectors=2, num_learners=learners, ring_capacity=4,
                                   weight_publish_interval=2, collector_inference_device="cpu"),
        asynchronous=True, device="cpu",
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("learners", [1, 2], ids=["2c1l", "2c2l-gloo"])
def test_async_trainer_on_mujoco(tmp_path: Path, learners: int) -> None:
    """2 collectors with 1 or 2 gloo learners: steps advance, updates run, weights arrive, clean end."""
    rec, boot = RecordingReporter(), Boot()
    result = run_async(_plan(tmp_path, learners), rec, should_stop=lambda: False, boot_view=boot)
    assert result.stop_reason == "completed"
    assert result.collector_steps == [30, 30] and result.iterations == 30
    assert result.env_steps == 30 * 4
    assert result.updates == 2 * (30 - 5 + 1)
    last = rec.snapshots[-1]
    # Any tick: a snapshot sent just before the end may reach the parent after the last tick was built.
    assert max(snap.scalars.get("async/weight_version", 0) for snap in rec.snapshots) > 0
    assert "async/policy_lag" in last.scalars and last.scalars["async/policy_lag"] >= 0
    assert "train/qf_loss" in last.scalars
    assert any("rollout/mean_return" in snap.scalars for snap in rec.snapshots)
    assert {f"learner{r}" for r in range(learners)} <= {w for snap in rec.snapshots for w in snap.timing}
    shares = {"perf/learner_update_pct", "perf/learner_decide_pct", "perf/learner_other_pct"}
    assert shares <= {k for snap in rec.snapshots for k in snap.scalars}, "where the learner's host time went"
    assert ("collector1", "running") in boot.states
    assert result.last_checkpoint is not None and result.last_checkpoint in rec.checkpoints
    assert peek_checkpoint(result.last_checkpoint)["extra"]["collector_steps"] == [30, 30]
    assert RunLayout(tmp_path).log("collector0").exists()
    assert not RunLayout(tmp_path).errors.exists(), "no worker wrote a traceback"
    assert not [s for s in list_segments() if s.creator_pid == os.getpid()], "every segment unlinked"


@pytest.mark.slow
def test_stop_request_ends_with_a_final_checkpoint(tmp_path: Path) -> None:
    """should_stop() mid-run stops every worker cleanly and rank 0 writes a final checkpoint."""
    rec = RecordingReporter()
    result = run_async(
        _plan(tmp_path, 1, iterations=100_000), rec,
        should_stop=lambda: bool(rec.snapshots) and rec.snapshots[-1].iteration >= 8,
    )  # fmt: skip
    assert result.stop_reason == "stop_requested"
    assert result.last_checkpoint is not None
    assert peek_checkpoint(result.last_checkpoint)["extra"]["iteration"] == result.iterations


def test_engine_snapshot_names_the_stage_shares(tmp_path: Path) -> None:
    """A stats tick becomes perf/collector_<stage>_pct (mean over collectors) and perf/learner_<stage>_pct."""
    collectors = {
        i: CollectorSnapshot(
            index=i, steps=10, steps_per_s=50.0, num_envs=2, episodes=0, mean_return=None, mean_ep_len=None,
            weight_version=1, policy_lag=0, ring_fill=0, timing_ms={"env_step": 18.0, "wait": 0.5},
            time_pct={"env_step": 90.0 - 10 * i, "wait": 10.0 * i, "other": 10.0},
        )
        for i in (0, 1)
    }  # fmt: skip
    learner = LearnerSnapshot(
        rank=0, global_step=10, updates=80, updates_per_s=200.0, learn_pct=85.0, buffer_size=40,
        host_pct={"update": 85.0, "publish": 5.0, "other": 10.0},
    )  # fmt: skip
    stats = EngineStats(
        elapsed_s=1.0, global_step=10, collector_steps=[10, 10], updates=80, learners={0: learner},
        collectors=collectors, summary=aggregate_collectors(list(collectors.values())),
    )  # fmt: skip
    scalars = engine_snapshot(_plan(tmp_path, 1), stats, envs_per_collector=2).scalars
    assert scalars["perf/collector_env_step_pct"] == 85.0 and scalars["perf/collector_wait_pct"] == 5.0
    assert scalars["perf/learner_update_pct"] == 85.0 and scalars["perf/learner_publish_pct"] == 5.0
    assert scalars["perf/collector_env_step_ms"] == 18.0


def test_engine_snapshot_lists_the_scalars_of_sources_that_did_not_report(tmp_path: Path) -> None:
    """Collectors with no new snapshot and a learner with no new update: their scalars are stale."""

    def stats(step: int, collector_steps: int, updates: int) -> EngineStats:
        collectors = {
            i: CollectorSnapshot(
                index=i, steps=collector_steps, steps_per_s=50.0, num_envs=2, episodes=1, mean_return=5.0,
                mean_ep_len=7.0, weight_version=1, policy_lag=0, ring_fill=0, timing_ms={"env_step": 1.0},
            )
            for i in (0, 1)
        }  # fmt: skip
        learner = LearnerSnapshot(
            rank=0, global_step=step, updates=updates, updates_per_s=9.0, learn_pct=50.0, buffer_size=4,
            metrics={"qf_loss": 1.5},
        )  # fmt: skip
        return EngineStats(
            elapsed_s=1.0, global_step=step, collector_steps=[collector_steps] * 2, updates=updates,
            learners={0: learner}, collectors=collectors,
            summary=aggregate_collectors(list(collectors.values())),
        )  # fmt: skip

    plan = _plan(tmp_path, 1)
    first = stats(10, 10, 80)
    assert engine_snapshot(plan, first, 2).stale == frozenset()
    # The learner moved to step 20 without an update; no collector reported since step 10.
    later = engine_snapshot(plan, stats(20, 10, 80), 2, previous=first)
    assert {"rollout/mean_return", "perf/env_steps_per_s", "async/reuse", "train/qf_loss"} <= later.stale
    assert "perf/updates_per_s" not in later.stale and "async/utd" not in later.stale
    fresh = engine_snapshot(plan, stats(20, 20, 90), 2, previous=first)
    assert fresh.stale == frozenset()


def test_engine_snapshot_counts_the_runs_env_steps_by_the_one_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rate, env steps and budget: this host's scaled by RunPlan.env_steps_per_iteration, no other rule."""
    import dataclasses

    from fastsac_async import HostGroup
    from fastsac_trainer.async_trainer import run_steps_per_host_step

    collectors = {
        i: CollectorSnapshot(
            index=i, steps=10, steps_per_s=50.0, num_envs=2, episodes=0, mean_return=None, mean_ep_len=None,
            weight_version=1, policy_lag=0, ring_fill=0,
        )
        for i in (0, 1)
    }  # fmt: skip
    stats = EngineStats(
        elapsed_s=1.0, global_step=10, collector_steps=[10, 10], updates=0, learners={},
        collectors=collectors, summary=aggregate_collectors(list(collectors.values())),
    )  # fmt: skip

    def counted(plan: RunPlan) -> tuple[float, int, int]:
        snapshot = engine_snapshot(plan, stats, 2 * run_steps_per_host_step(plan))
        return snapshot.scalars["perf/env_steps_per_s"], snapshot.env_steps, snapshot.total_env_steps

    hosts = HostGroup(host_rank=1, num_hosts=2, store_host="node0", store_port=29400, store_prefix="r")
    assert counted(_plan(tmp_path, 1)) == (200.0, 40, 120)
    assert counted(dataclasses.replace(_plan(tmp_path, 1), hosts=hosts)) == (400.0, 80, 240)
    monkeypatch.setattr("fastsac_trainer.plan.iteration_env_steps", lambda num_envs, hosts: 3 * num_envs)
    assert counted(_plan(tmp_path, 1)) == (600.0, 120, 360), "the rule changed: every count follows it"
