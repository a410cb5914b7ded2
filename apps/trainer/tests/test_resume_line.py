"""The resume line promises a replay only when the learner that reads it accepts it (one rule for both)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fastsac_async import AsyncOptions, HostGroup, RunLayout, TrainingRun
from fastsac_async.spec import EngineSpec
from fastsac_async.testing import cpu_topology
from fastsac_core import CheckpointError, ReplayBuffer, load_replay, save_replay, transition_fields
from fastsac_trainer.launch import resume_line
from fastsac_trainer.plan import RunPlan
from fastsac_trainer.tasks import get_task, probe_dims

NUM_ENVS = 4


def _plan(run_dir: Path, collectors: int, hosts: HostGroup | None = None) -> RunPlan:
    """An async pendulum run of 4 envs on ``collectors`` collectors, resuming model_5 of ``run_dir``."""
    spec = get_task("pendulum")
    factory = spec.env_factory()
    agent = spec.agent_config(buffer_size=16, batch_size=8)
    run = TrainingRun(
        env_factory=factory, dims=probe_dims(factory), seed=1, num_iterations=10, time_limit_s=None,
        logging_interval=5, save_interval=5, run_dir=run_dir, resume_from=RunLayout(run_dir).checkpoint(5),
    )  # fmt: skip
    topology = cpu_topology(num_envs=NUM_ENVS, num_collectors=collectors, num_learners=1, batch_size=8)
    return RunPlan(
        task_name="pendulum", run=run, num_envs=NUM_ENVS, agent=agent, asynchronous=True, device="cpu",
        async_options=AsyncOptions(num_collectors=collectors), topology=topology, hosts=hosts,
    )  # fmt: skip


def _save_uneven_shard(plan: RunPlan, path: Path) -> None:
    """A learner's shard of two collectors (blocks [2, 2]) stopped 3 and 4 steps in (14 transitions)."""
    dims = plan.run.dims
    shard = ReplayBuffer.of(dims, plan.agent, NUM_ENVS, blocks=[2, 2])
    fields = transition_fields(dims.obs_dim, dims.stored_critic_obs_dim, dims.act_dim)
    for block, steps in enumerate((3, 4)):
        shard.extend_block(
            block,
            {name: torch.zeros(steps, 2, *shape, dtype=dtype) for name, (shape, dtype) in fields.items()},
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    save_replay(path, shard.snapshot(), gstep=5)


def _learner_restores(plan: RunPlan, rank: int, path: Path) -> None:
    """What the learner of local rank ``rank`` does with ``path``: its buffer, then ``load_replay``."""
    spec = EngineSpec(run=plan.run, agent=plan.agent, options=plan.async_options, topology=plan.topology)  # type: ignore[arg-type]
    layout = spec.replay_layout(rank)
    load_replay(path, ReplayBuffer.of(plan.run.dims, plan.agent, layout.num_envs, blocks=layout.blocks))


def test_a_replay_the_learner_would_refuse_is_announced_as_an_empty_buffer(tmp_path: Path) -> None:
    """Uneven shards of 2 collectors resumed with 1: the line says empty buffer; the learner refuses it."""
    two = _plan(tmp_path, collectors=2)
    replay = RunLayout(tmp_path).replay(0)
    _save_uneven_shard(two, replay)
    line = resume_line(two, 5)
    assert "replay buffer of 14 transitions from iteration 5" in line, line
    _learner_restores(two, 0, replay)  # accepted, as promised

    one = _plan(tmp_path, collectors=1)
    line = resume_line(one, 5)
    why = "hold different step counts [3, 4], and this buffer's blocks [4] would mix them"
    assert "no replay buffer to restore (replay_rank0.pt: replay file" in line and why in line, line
    assert line.endswith("learning restarts from an empty buffer"), line
    with pytest.raises(
        CheckpointError, match=r"hold different step counts \[3, 4\], and this buffer's blocks \[4\]"
    ):
        _learner_restores(one, 0, replay)


def test_another_hosts_learners_read_their_run_wide_ranks_shards(tmp_path: Path) -> None:
    """Host 1 of 2 (one learner each) announces replay_rank1.pt of host1/, the file its learner reads."""
    hosts = HostGroup(host_rank=1, num_hosts=2, store_host="127.0.0.1", store_port=1, store_prefix="t")
    plan = _plan(tmp_path, collectors=2, hosts=hosts)
    shard = RunLayout(tmp_path).host(1).replay(1)
    _save_uneven_shard(plan, shard)
    assert plan.run.replay_to_resume(1, 1) == shard
    assert "replay buffer of 14 transitions from iteration 5" in resume_line(plan, 5)
