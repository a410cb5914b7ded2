"""Reward normalisation lets ``task=gym`` learn an env whose rewards are 100x larger than the support.

InvertedPendulum-v5 (200-step episodes) behind a registered ``TransformReward`` wrapper paying 100 per
upright step: discounted values reach ~8,700, far outside ``task=gym``'s raw support of -1000..1000.
With ``algo.agent.reward_normalization=true`` the critic learns in scaled units (support ±10) and the
final checkpoint's deterministic policy balances for more than twice the best random episode (it
reached 66 of 200 steps with seed 2; unnormalised, with qf_max pinned at 1000, 36); its checkpoint
carries the scale it trained with. CPU-sized as ``test_gym_learning.py`` is (``CPU_SIZED``: networks
64/128, batch 256, 8 envs x 4 updates; 500 iterations). Measured: wiki/benchmarks.md, "Reward
normalisation".
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fastsac_core import EnvDims, FastSACAgent, FastSACConfig, ReplayBuffer, load_checkpoint, peek_checkpoint
from fastsac_trainer import train
from fastsac_trainer.evaluate import evaluate, load_policy
from fastsac_trainer.tasks import env_factory_for
from fastsac_trainer.testing import CPU_SIZED

FACTOR = 100.0
THRESHOLD = 30.0  # of 200 steps; a random policy: mean ~5, best episode 14; measured here: 66
SCALED_ENV = """
import gymnasium as gym
from gymnasium.wrappers import TransformReward


def make(factor=1.0, **kwargs):
    return TransformReward(gym.make("InvertedPendulum-v5", **kwargs), lambda r: factor * r)


gym.register("ScaledInvertedPendulum-v0", entry_point=make)
"""
TASK = {
    "name": "gym",
    "env_id": "ScaledInvertedPendulum-v0",
    "env_import": "scaled_pendulum",
    "env_kwargs": {"factor": FACTOR},
    "max_episode_steps": 200,
}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.slow
def test_normalised_rewards_learn_a_pendulum_paying_100_per_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rewards x100, normalised: deterministic eval >= 30 of 200 steps; the checkpoint keeps the scale."""
    (tmp_path / "scaled_pendulum.py").write_text(SCALED_ENV, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = train(
        "gym",
        env_id=TASK["env_id"],
        env_import=TASK["env_import"],
        env_kwargs=TASK["env_kwargs"],
        overrides=[
            "algo.agent.reward_normalization=true",
            *CPU_SIZED,
            "task.max_episode_steps=200",
            "algo.trainer.num_learning_iterations=500",
            "algo.trainer.asynchronous=false",
            "algo.trainer.device=cpu",
            "algo.trainer.logging_interval=100",
            "console=plain",
            f"runs_root={tmp_path / 'runs'}",
            "seed=2",
        ],
    )
    assert result.last_checkpoint is not None and result.stop_reason == "completed"
    policy, _ = load_policy(result.last_checkpoint)
    learned = evaluate(policy, env_factory_for(TASK), 16, seed=10_000)
    summary = f"eval mean {learned.mean_return / FACTOR:.1f} steps; metrics {result.metrics}"
    assert learned.mean_return / FACTOR >= THRESHOLD, summary
    # The scale it trained with is in the checkpoint and comes back with it (what a resume loads).
    info = peek_checkpoint(result.last_checkpoint)
    cfg = FastSACConfig(**info["config"])
    dims = EnvDims(**{k: tuple(v) if isinstance(v, list) else v for k, v in info["dims"].items()})
    agent = FastSACAgent(dims, cfg, "cpu", buffer=ReplayBuffer.of(dims, cfg, info["buffer"]["num_envs"]))
    load_checkpoint(result.last_checkpoint, agent, restore_rng=False)
    saved = torch.load(result.last_checkpoint, weights_only=True)["agent"]["reward_scale"]
    scale = float(agent.reward_scale.scale)
    assert scale == float(saved["scale"]) and float(agent.reward_scale.returns.count) > 0
    assert scale < 1.0 / FACTOR, summary  # returns of 100 per step spread far wider than 1
