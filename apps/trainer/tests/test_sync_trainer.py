"""The synchronous trainer: reports, checkpoints, resume, stop requests and the time limit."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest

from fastsac_async.config import AsyncOptions
from fastsac_async.learner.collective import SoloCollective
from fastsac_async.learner.decider import TrainDecider
from fastsac_async.run_layout import RunLayout
from fastsac_async.spec import TrainingRun
from fastsac_core import peek_checkpoint, peek_replay
from fastsac_trainer.plan import RunPlan
from fastsac_trainer.sync_trainer import run_sync
from fastsac_trainer.tasks import get_task, probe_dims
from fastsac_trainer.testing import RecordingReporter

# Tiny and fast: 4 pendulum envs, 2 random iterations, then 2 updates per iteration on 16 samples.
RUN_FIELDS = frozenset(f.name for f in dataclasses.fields(TrainingRun))
"""Keyword arguments of ``make_plan`` that belong to the plan's ``TrainingRun``."""

TINY: dict[str, Any] = {
    "actor_hidden_dim": 16,
    "critic_hidden_dim": 16,
    "num_atoms": 11,
    "batch_size": 16,
    "buffer_size": 64,
    "num_updates": 2,
    "learning_starts": 2,
}

PERF = (
    "perf/env_steps_per_s",
    "perf/updates_per_s",
    "perf/learn_pct",
    "perf/collect_ms_per_batch",
    "async/utd",
)
TRAIN = tuple(
    f"train/{k}"
    for k in ("qf_loss", "actor_loss", "alpha", "alpha_loss", "policy_entropy", "qf_max", "reward_scale")
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_plan(
    run_dir: Path, *, task: str = "pendulum", agent: dict[str, Any] | None = None, **kw: Any
) -> RunPlan:
    spec = get_task(task)
    factory = spec.env_factory()
    run: dict[str, Any] = {
        "env_factory": factory,
        "dims": probe_dims(factory),
        "seed": 3,
        "num_iterations": 7,
        "time_limit_s": None,
        "logging_interval": 2,
        "save_interval": 3,
        "run_dir": run_dir,
    }
    fields: dict[str, Any] = {
        "task_name": task,
        "num_envs": 4,
        "agent": spec.agent_config(**(TINY if agent is None else agent)),
        "async_options": AsyncOptions(),
        "asynchronous": False,
        "device": "cpu",
    }
    run.update((key, value) for key, value in kw.items() if key in RUN_FIELDS)
    fields.update((key, value) for key, value in kw.items() if key not in RUN_FIELDS)
    return RunPlan(run=TrainingRun(**run), **fields)


def test_checkpoints_at_save_interval_and_at_the_end(tmp_path: Path) -> None:
    """Checkpoints are written at every save_interval and once more at the final iteration."""
    reporter = RecordingReporter()
    result = run_sync(make_plan(tmp_path), reporter)
    expected = [RunLayout(tmp_path).checkpoint(i) for i in (3, 6, 7)]
    assert reporter.checkpoints == expected
    assert all(p.is_file() for p in expected)
    assert result.last_checkpoint == expected[-1]
    assert (result.iterations, result.env_steps, result.stop_reason) == (7, 28, "completed")
    # Updates start at the iteration that completes learning_starts=2 batches: 6 iterations x 2 updates.
    assert result.updates == 12
    assert peek_checkpoint(expected[-1])["extra"]["iteration"] == 7
    assert not reporter.closed


def test_snapshots_carry_the_design_metrics(tmp_path: Path) -> None:
    """Every logging interval reports perf, rollout, train and sync timing under their DESIGN names."""
    reporter = RecordingReporter()
    # Learning starts at iteration 3, after the first snapshot.
    plan = make_plan(tmp_path, num_iterations=6, save_interval=100, agent={**TINY, "learning_starts": 3})
    run_sync(plan, reporter)
    assert [s.iteration for s in reporter.snapshots] == [2, 4, 6]
    first, last = reporter.snapshots[0], reporter.snapshots[-1]
    assert first.warming_up and not last.warming_up
    assert not any(k.startswith("train/") for k in first.scalars)
    assert set(PERF + TRAIN) <= set(last.scalars)
    assert last.scalars["async/utd"] == 2.0
    assert first.scalars["async/utd"] == 0.0
    assert (last.env_steps, last.total_env_steps) == (24, 24)
    assert set(last.timing["sync"]) == {"env_step", "inference", "ingest", "update"}
    assert all(v >= 0.0 for v in last.timing["sync"].values())
    assert 0.0 < last.scalars["perf/learn_pct"] <= 100.0
    # Random pendulum episodes last a handful of steps, so episodes have ended by iteration 6.
    assert last.scalars["rollout/mean_ep_len"] >= 1.0
    assert last.scalars["rollout/mean_return"] >= 0.0


def test_resume_continues_the_iteration_counter(tmp_path: Path) -> None:
    """A run resumed from a checkpoint continues its iteration and update counters."""
    first = run_sync(make_plan(tmp_path, num_iterations=5, save_interval=100), RecordingReporter())
    assert first.last_checkpoint == RunLayout(tmp_path).checkpoint(5)
    reporter = RecordingReporter()
    second = run_sync(
        make_plan(tmp_path, num_iterations=8, save_interval=100, resume_from=first.last_checkpoint), reporter
    )
    assert second.iterations == 8
    assert second.updates == first.updates + 3 * TINY["num_updates"]
    assert [s.iteration for s in reporter.snapshots] == [6, 8]
    assert reporter.checkpoints == [RunLayout(tmp_path).checkpoint(8)]
    assert peek_checkpoint(reporter.checkpoints[0])["extra"]["env_steps"] == 32


def test_resume_past_the_budget_does_nothing(tmp_path: Path) -> None:
    """Resuming at or beyond num_iterations returns at once without a new checkpoint."""
    first = run_sync(make_plan(tmp_path, num_iterations=3), RecordingReporter())
    reporter = RecordingReporter()
    again = run_sync(make_plan(tmp_path, num_iterations=3, resume_from=first.last_checkpoint), reporter)
    assert again.iterations == 3 and again.last_checkpoint == first.last_checkpoint
    assert reporter.checkpoints == [] and reporter.snapshots == []


def test_should_stop_ends_with_a_final_checkpoint(tmp_path: Path) -> None:
    """A stop request ends the loop at the next iteration boundary and writes a checkpoint there."""
    calls = iter(range(1000))
    reporter = RecordingReporter()
    result = run_sync(
        make_plan(tmp_path, num_iterations=50, save_interval=100),
        reporter,
        should_stop=lambda: next(calls) >= 4,
    )
    assert (result.iterations, result.stop_reason) == (4, "stop_requested")
    assert reporter.checkpoints == [RunLayout(tmp_path).checkpoint(4)]
    assert reporter.snapshots[-1].iteration == 4


def test_time_limit_ends_with_a_final_checkpoint(tmp_path: Path) -> None:
    """A zero time limit stops before the first iteration and still checkpoints."""
    reporter = RecordingReporter()
    result = run_sync(make_plan(tmp_path, num_iterations=50, time_limit_s=0.0), reporter)
    assert (result.iterations, result.stop_reason) == (0, "time_limit")
    assert reporter.checkpoints == [RunLayout(tmp_path).checkpoint(0)]


def test_same_seed_same_run(tmp_path: Path) -> None:
    """Two runs of one plan produce the same training metrics (seeded envs, torch and actions)."""
    a, b = RecordingReporter(), RecordingReporter()
    run_sync(make_plan(tmp_path / "a", num_iterations=6, save_interval=100), a)
    run_sync(make_plan(tmp_path / "b", num_iterations=6, save_interval=100), b)

    def train(r: RecordingReporter) -> dict[str, float]:
        return {k: v for k, v in r.snapshots[-1].scalars.items() if k.startswith(("train/", "rollout/"))}

    assert train(a) == train(b)
    assert dataclasses.asdict(a.snapshots[-1])["iteration"] == 6


def _tensors(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a nested checkpoint payload by its path (tensors and plain values)."""
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _tensors(sub, f"{prefix}.{key}").items()}
    if isinstance(tree, list | tuple):
        return {k: v for i, sub in enumerate(tree) for k, v in _tensors(sub, f"{prefix}[{i}]").items()}
    return {prefix: tree}


def _differ(a: Path, b: Path, *keys: str) -> list[str]:
    """The leaves under ``keys`` of two saved files that are not bit-identical."""
    import torch

    left, right = (torch.load(p, weights_only=True) for p in (a, b))
    one = _tensors({k: left[k] for k in keys})
    two = _tensors({k: right[k] for k in keys})
    assert one.keys() == two.keys()

    def same(x: Any, y: Any) -> bool:
        return bool(torch.equal(x, y)) if isinstance(x, torch.Tensor) else bool(x == y)

    return [k for k in one if not same(one[k], two[k])]


def test_a_stopped_and_resumed_run_ends_bit_identical_to_one_that_never_stopped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopped at N, resumed to 2N: a sync run ends with the weights, optimizers and replay of a whole run."""
    # A buffer of 8 steps per env wraps before 12 iterations; reward normalisation keeps each env's
    # running return; random pendulum episodes end every few steps, before and after the stop.
    agent = {**TINY, "buffer_size": 8, "reward_normalization": True}
    whole = run_sync(make_plan(tmp_path / "whole", num_iterations=12, agent=agent), RecordingReporter())
    calls = iter(range(1000))
    plan = make_plan(tmp_path / "stopped", num_iterations=12, agent=agent)
    stopped = run_sync(plan, RecordingReporter(), should_stop=lambda: next(calls) >= 6)
    assert (stopped.iterations, stopped.stop_reason) == (6, "stop_requested")
    replay = RunLayout(tmp_path / "stopped").replay(0)
    saved = peek_replay(replay)
    assert (saved.gstep, saved.transitions) == (6, 6 * 4)  # 6 steps of 4 envs, at the stop
    with caplog.at_level("INFO", logger="fastsac_trainer.sync_trainer"):
        resumed = run_sync(
            make_plan(
                tmp_path / "stopped", num_iterations=12, agent=agent, resume_from=stopped.last_checkpoint
            ),
            RecordingReporter(),
        )
    assert "24 transitions of iteration 6; the episodes continue" in caplog.text
    assert (resumed.iterations, resumed.updates) == (whole.iterations, whole.updates)
    assert whole.last_checkpoint is not None and resumed.last_checkpoint is not None
    assert _differ(whole.last_checkpoint, resumed.last_checkpoint, "agent", "rng") == []
    assert _differ(RunLayout(tmp_path / "whole").replay(0), replay, "replay", "gstep") == []


def test_a_resume_after_a_lost_replay_write_uses_the_last_complete_file_and_says_how_old(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A replay older than the checkpoint (a newer write was killed) comes back, named with its age, cut."""
    import shutil

    from fastsac_trainer.launch import resume_line

    first = run_sync(make_plan(tmp_path, num_iterations=3), RecordingReporter())
    replay = RunLayout(tmp_path).replay(0)
    shutil.copy(replay, tmp_path / "kept.pt")
    second_plan = make_plan(tmp_path, num_iterations=5, resume_from=first.last_checkpoint)
    second = run_sync(second_plan, RecordingReporter())
    # The write of iteration 5 was killed: its partial file lies beside the complete one of iteration 3.
    shutil.copy(tmp_path / "kept.pt", replay)
    (replay.parent / f".{replay.name}.x1y2.tmp").write_bytes(b"torn")
    plan = make_plan(tmp_path, num_iterations=7, resume_from=second.last_checkpoint)
    line = resume_line(plan, 5)
    assert line.startswith(f"resuming from {second.last_checkpoint} (iteration 5); replay buffer of 12 ")
    assert "transitions from iteration 3, 2 iterations before the checkpoint, written " in line
    with caplog.at_level("INFO", logger="fastsac_trainer.sync_trainer"):
        third = run_sync(plan, RecordingReporter())
    assert "12 transitions of iteration 3; the episodes restart" in caplog.text
    assert third.iterations == 7 and peek_replay(replay).transitions == 12 + 2 * 4


def test_without_save_replay_no_replay_is_written_and_a_resume_starts_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """save_replay=false writes no replay file, and a resume says learning restarts from an empty buffer."""
    first = run_sync(make_plan(tmp_path, num_iterations=3, save_replay=False), RecordingReporter())
    assert not RunLayout(tmp_path).replay(0).exists()
    with caplog.at_level("INFO", logger="fastsac_trainer.sync_trainer"):
        run_sync(
            make_plan(tmp_path, num_iterations=4, save_replay=False, resume_from=first.last_checkpoint),
            RecordingReporter(),
        )
    assert "learning restarts from an empty replay buffer (algo.trainer.save_replay=false)" in caplog.text


@pytest.mark.parametrize("learning_starts", [0, 1, 3])
def test_both_trainers_start_learning_at_the_same_step(tmp_path: Path, learning_starts: int) -> None:
    """Iteration by iteration, the sync loop runs the updates the async decider grants for the same steps."""
    agent = {**TINY, "learning_starts": learning_starts}
    reporter = RecordingReporter()
    result = run_sync(make_plan(tmp_path, num_iterations=6, logging_interval=1, agent=agent), reporter)
    sync_runs = [int(s.scalars["async/utd"]) for s in reporter.snapshots]  # one iteration per snapshot

    decider = TrainDecider(
        SoloCollective(),
        num_collectors=1,
        num_updates=TINY["num_updates"],
        learning_starts=learning_starts,
        utd_mode="strict",
    )
    # One collector: collector steps = gstep; a buffer can be sampled once it holds 2 steps.
    decided = [
        decider.step(collector_steps=gstep, has_data=gstep >= 2, stop_vote=False).run_updates
        for gstep in range(1, 7)
    ]
    assert sync_runs == decided
    assert result.updates == sum(decided)
    first = next(i for i, n in enumerate(decided, start=1) if n)
    assert first == max(learning_starts, 2)  # the first iteration with a complete transition


@pytest.mark.gpu
def test_sync_trainer_on_cuda(tmp_path: Path) -> None:
    """On CUDA (compiled, CUDA graphs, bf16) the loop runs, reports finite metrics and checkpoints."""
    reporter = RecordingReporter()
    result = run_sync(make_plan(tmp_path, num_iterations=6, device="cuda"), reporter)
    assert result.updates == 5 * TINY["num_updates"]
    last = reporter.snapshots[-1]
    assert all(math.isfinite(last.scalars[k]) for k in TRAIN)
    assert last.timing["sync"]["update"] > 0.0
    assert result.last_checkpoint == RunLayout(tmp_path).checkpoint(6)


def test_an_inline_evaluations_env_steps_are_the_whole_runs(tmp_path: Path) -> None:
    """An evaluation's env steps count every host's envs (RunPlan.env_steps_per_iteration), not one host's."""
    from fastsac_async import EvalSettings, HostGroup
    from fastsac_core.testing import make_agent
    from fastsac_trainer.sync_eval import InlineEvaluation

    hosts = HostGroup(host_rank=0, num_hosts=2, store_host="node0", store_port=29400, store_prefix="r")
    settings = EvalSettings(interval_s=None, interval=2, episodes=1)
    plan = make_plan(tmp_path, evaluation=settings, hosts=hosts)
    agent = make_agent(plan.run.dims, plan.agent, "cpu", num_envs=plan.num_envs)
    point = InlineEvaluation(plan, settings, start_iteration=0).maybe_evaluate(2, agent, lambda: False)
    assert point is not None and point.env_steps == 2 * 4 * 2


def test_the_sync_trainers_random_actions_are_the_envs_own_call() -> None:
    """The env's sample_actions raising while exploring is one EnvCallError line, as in a collector."""
    import numpy as np

    from fastsac_core import EnvCallError
    from fastsac_trainer.sync_trainer import _choose_actions

    class _NoRandomActions:
        env_id = "NoRandom-v0"

        def sample_actions(self) -> Any:
            raise ValueError("no action space")

    with pytest.raises(EnvCallError, match=r"^NoRandom-v0's sample_actions\(\) raised ValueError: no "):
        _choose_actions(_NoRandomActions(), None, np.zeros((1, 1), np.float32), True)  # type: ignore[arg-type]
