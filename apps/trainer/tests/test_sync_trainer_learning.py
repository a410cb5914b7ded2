"""The synchronous trainer learns: InvertedPendulum-v5 on CPU within a CI budget.

Threshold and why it shows learning: after 600 iterations of the ``pendulum`` task (2,400 env
steps, 2,204 updates, fixed seed), the final checkpoint's deterministic policy must balance for a
mean of >= 150 of the 200 steps over 16 fresh episodes. A uniformly random policy on the same
16 envs is measured in the test: it keeps the pole up for ~5 steps (mean 4.8, max 14 measured on
the dev machine), so 150 is > 10x the best random episode. Measured: every seed tried (1, 3, 4)
reaches the 200-step maximum; the test takes ~23 s at load average 1 on the 2-core dev VM (~55 s at
load 6-7).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from fastsac_async.config import AsyncOptions
from fastsac_async.spec import TrainingRun
from fastsac_core import load_checkpoint
from fastsac_core.env import BatchedEnv
from fastsac_core.testing import make_agent
from fastsac_trainer.plan import RunPlan
from fastsac_trainer.sync_trainer import run_sync
from fastsac_trainer.tasks import get_task, probe_dims
from fastsac_trainer.testing import RecordingReporter

EVAL_ENVS = 16
THRESHOLD = 150.0

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def first_episode_returns(
    env: BatchedEnv, policy: Callable[[np.ndarray], np.ndarray], limit: int
) -> np.ndarray:
    """Return of the first episode of every env under ``policy`` (a batch in, a batch out)."""
    returns = np.full(env.num_envs, np.nan)
    obs, _ = env.reset()
    for _ in range(limit):
        result = env.step(policy(obs))
        ended = np.flatnonzero(result.terminated | result.truncated)
        for k, i in enumerate(ended):
            if np.isnan(returns[i]):
                returns[i] = result.episode_returns[k]
        if not np.isnan(returns).any():
            break
        obs = result.obs
    env.close()
    assert not np.isnan(returns).any()
    return returns


@pytest.mark.slow
def test_sync_trainer_learns_inverted_pendulum(tmp_path: Path) -> None:
    """600 sync iterations lift the deterministic policy's return from random (~5) to >= 150 of 200."""
    spec = get_task("pendulum")
    factory = spec.env_factory()
    run = TrainingRun(
        env_factory=factory,
        dims=probe_dims(factory),
        seed=1,
        num_iterations=600,  # the sync trainer's measured budget; the task's 1000 are the async default's
        time_limit_s=None,
        logging_interval=100,
        save_interval=10**9,
        run_dir=tmp_path,
    )
    plan = RunPlan(
        task_name=spec.name,
        run=run,
        num_envs=spec.num_envs,
        agent=spec.agent_config(),
        async_options=AsyncOptions(),
        asynchronous=False,
        device="cpu",
    )
    limit = spec.max_episode_steps
    assert limit is not None
    start = time.perf_counter()
    result = run_sync(plan, RecordingReporter())
    train_s = time.perf_counter() - start

    random_env = factory(EVAL_ENVS, 10_000)
    random_returns = first_episode_returns(random_env, lambda _: random_env.sample_actions(), limit)

    agent = make_agent(plan.run.dims, plan.agent, "cpu", num_envs=plan.num_envs)
    assert result.last_checkpoint is not None
    load_checkpoint(result.last_checkpoint, agent)

    def greedy(obs: np.ndarray) -> np.ndarray:
        actions: np.ndarray = agent.act(torch.from_numpy(obs), deterministic=True).numpy()
        return actions

    learned_returns = first_episode_returns(factory(EVAL_ENVS, 10_000), greedy, limit)
    summary = (
        f"trained {result.iterations} iterations / {result.updates} updates in {train_s:.0f} s; "
        f"eval mean {learned_returns.mean():.1f} vs random mean {random_returns.mean():.1f} "
        f"(max {random_returns.max():.0f}); training mean return {result.mean_return}"
    )
    assert random_returns.mean() < 20.0, summary
    assert learned_returns.mean() >= THRESHOLD, summary
    # The rolling training return (stochastic policy, last 100 episodes) has also left chance.
    assert result.mean_return is not None and result.mean_return > 3 * random_returns.mean(), summary
