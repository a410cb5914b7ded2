"""Reward normalisation (Note [reward scale]): the statistics, where they are applied, checkpoints."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from fastsac_core import CheckpointError, FastSACAgent, ReplayBuffer, load_checkpoint, save_checkpoint
from fastsac_core.testing import TINY_SHARED_DIMS, make_agent, run_processes, tiny_config

GAMMA = 0.9


def _steps(num_envs: int, steps: int, seed: int, reward_scale: float = 1.0) -> list[dict[str, torch.Tensor]]:
    """Random steps of ``num_envs`` envs: rewards around 2, one episode end in ten."""
    g = torch.Generator().manual_seed(seed)
    dims = TINY_SHARED_DIMS
    out = []
    for _ in range(steps):
        out.append(
            {
                "obs": torch.randn(num_envs, dims.obs_dim, generator=g),
                "actions": torch.rand(num_envs, dims.act_dim, generator=g) * 0.8,
                "rewards": reward_scale * (2.0 + torch.randn(num_envs, generator=g)),
                "terminated": torch.rand(num_envs, generator=g) < 0.05,
                "truncated": torch.rand(num_envs, generator=g) < 0.05,
            }
        )
    return out


def _agent(num_envs: int = 4, **overrides: object) -> FastSACAgent:
    settings: dict[str, object] = {"reward_normalization": True, "normalized_v_max": 6.0, **overrides}
    cfg = tiny_config(gamma=GAMMA, num_steps=3, **settings)
    return make_agent(TINY_SHARED_DIMS, cfg, "cpu", num_envs=num_envs)


def _by_hand(steps: list[dict[str, torch.Tensor]], bound: float) -> float:
    """1 / max(std(G), max|G| / bound) of the returns G_t = r_t + gamma G_{t-1}, reset after an end."""
    n = steps[0]["rewards"].shape[0]
    running, seen = [0.0] * n, []
    for step in steps:
        for e in range(n):
            running[e] = GAMMA * running[e] + float(step["rewards"][e])
            seen.append(running[e])
            if bool(step["terminated"][e]) or bool(step["truncated"][e]):
                running[e] = 0.0
    mean = sum(seen) / len(seen)
    std = math.sqrt(sum((x - mean) ** 2 for x in seen) / len(seen))
    return 1.0 / max(std, max(abs(x) for x in seen) / bound)


def test_scale_is_one_over_the_larger_of_return_std_and_peak_over_bound() -> None:
    """The merged scale equals 1 / max(std(G), max|G| / bound) of the returns computed by hand."""
    agent = _agent()
    steps = _steps(4, 60, seed=1)
    for step in steps:
        agent.buffer.extend(step)
    agent.prepare(agent.buffer.sample(2))
    assert float(agent.reward_scale.scale) == pytest.approx(_by_hand(steps, 3.0), rel=1e-5)


def test_peak_term_keeps_every_scaled_return_within_the_bound() -> None:
    """With a constant reward (tiny std), the peak term bounds every scaled return by normalized_v_max/2."""
    agent = _agent(num_envs=2)
    for _ in range(200):  # no episode end: G climbs to 5 / (1 - gamma) = 50, its std stays below
        agent.buffer.extend({**_steps(2, 1, seed=0)[0], "rewards": torch.full((2,), 5.0),
                             "terminated": torch.zeros(2, dtype=torch.bool),
                             "truncated": torch.zeros(2, dtype=torch.bool)})  # fmt: skip
    agent.prepare(agent.buffer.sample(2))
    peak = 5.0 * (1 - GAMMA**200) / (1 - GAMMA)
    assert float(agent.reward_scale.scale) == pytest.approx(3.0 / peak, rel=1e-5)


def test_replay_keeps_raw_rewards_and_prepare_scales_the_n_step_sum() -> None:
    """Stored rewards stay raw; a prepared batch's rewards are the raw n-step sums times the scale."""
    agent = _agent()
    steps = _steps(4, 40, seed=2)
    for step in steps:
        agent.buffer.extend(step)
    stored = agent.buffer.storage["rewards"][:40]
    assert torch.equal(stored, torch.stack([s["rewards"] for s in steps]))
    torch.manual_seed(5)
    raw = agent.buffer.sample(8)
    prepared = agent.prepare(raw)
    torch.testing.assert_close(prepared.rewards, raw.rewards * agent.reward_scale.scale)
    assert float(agent.reward_scale.scale) < 0.5  # returns of ~2 per step at gamma 0.9 spread wider than 2


def test_prepared_rewards_do_not_depend_on_the_env_reward_scale() -> None:
    """The same env with rewards x100 gives the same prepared (scaled) rewards: the support fits both."""
    prepared = []
    for factor in (1.0, 100.0):
        agent = _agent()
        for step in _steps(4, 50, seed=3, reward_scale=factor):
            agent.buffer.extend(step)
        torch.manual_seed(7)
        prepared.append(agent.prepare(agent.buffer.sample(8)).rewards)
    torch.testing.assert_close(prepared[1], prepared[0], rtol=1e-5, atol=1e-6)


def test_block_writes_give_the_scale_of_whole_batch_writes() -> None:
    """Ragged ingest (each block at its own pace) feeds the statistics exactly as lockstep writes do."""
    cfg = tiny_config(gamma=GAMMA, reward_normalization=True, normalized_v_max=6.0)
    whole = ReplayBuffer.of(TINY_SHARED_DIMS, cfg, 4)
    ragged = ReplayBuffer.of(TINY_SHARED_DIMS, cfg, 4, blocks=(1, 3))
    steps = _steps(4, 30, seed=4)
    whole.extend_batch({k: torch.stack([s[k] for s in steps]) for k in steps[0]})
    for lo, hi in ((0, 10), (10, 30)):  # block 1 first, then block 0, in spans of different lengths
        chunk = {k: torch.stack([s[k] for s in steps[lo:hi]]) for k in steps[0]}
        ragged.extend_block(1, {k: v[:, 1:] for k, v in chunk.items()})
    for lo, hi in ((0, 25), (25, 30)):
        chunk = {k: torch.stack([s[k] for s in steps[lo:hi]]) for k in steps[0]}
        ragged.extend_block(0, {k: v[:, :1] for k, v in chunk.items()})
    for buffer in (whole, ragged):
        stats, peak = buffer.reward_scale.pending()
        buffer.reward_scale.merge(stats.clone(), peak.clone())
    torch.testing.assert_close(ragged.reward_scale.scale, whole.reward_scale.scale)
    torch.testing.assert_close(ragged.reward_scale.running, whole.reward_scale.running)


def test_a_write_longer_than_the_buffer_still_counts_every_step() -> None:
    """Steps a write pushes past the capacity are observed too: the scale matches a buffer that kept them."""
    cfg = tiny_config(gamma=GAMMA, reward_normalization=True, normalized_v_max=6.0)
    small = ReplayBuffer.of(TINY_SHARED_DIMS, replace(cfg, buffer_size=8), 2)
    large = ReplayBuffer.of(TINY_SHARED_DIMS, replace(cfg, buffer_size=64), 2)
    steps = _steps(2, 20, seed=6)
    batch = {k: torch.stack([s[k] for s in steps]) for k in steps[0]}
    for buffer in (small, large):
        buffer.extend_batch(batch)
        buffer.reward_scale.merge(*(t.clone() for t in buffer.reward_scale.pending()))
    torch.testing.assert_close(small.reward_scale.scale, large.reward_scale.scale)


def test_checkpoint_restores_the_scale_and_resets_the_running_returns(tmp_path: Path) -> None:
    """save/load keeps the statistics and the scale; the per-env returns restart at 0 (new episodes)."""
    agent = _agent()
    for step in _steps(4, 30, seed=8):
        agent.buffer.extend(step)
    agent.update(4)
    path = save_checkpoint(tmp_path / "c.pt", agent)
    resumed = _agent()
    load_checkpoint(path, resumed)
    assert float(resumed.reward_scale.scale) == float(agent.reward_scale.scale) != 1.0
    assert float(resumed.reward_scale.peak) == float(agent.reward_scale.peak) > 0.0
    assert torch.equal(resumed.reward_scale.returns.m2, agent.reward_scale.returns.m2)
    assert not resumed.reward_scale.running.any() and agent.reward_scale.running.any()


def test_a_checkpoint_without_reward_statistics_loads_with_a_fresh_scale_and_its_raw_support(
    tmp_path: Path,
) -> None:
    """A checkpoint written before reward normalisation existed loads without it (scale 1), not with it."""
    raw = {"reward_normalization": False, "v_min": -5.0, "v_max": 5.0}
    agent = _agent(**raw)
    for step in _steps(4, 30, seed=9):
        agent.buffer.extend(step)
    agent.update(4)
    path = save_checkpoint(tmp_path / "old.pt", agent)
    payload = torch.load(path, weights_only=True)
    del payload["agent"]["reward_scale"]
    for key in ("reward_normalization", "normalized_v_max"):
        del payload["config"][key]
    torch.save(payload, path)
    resumed = _agent(**raw)
    for step in _steps(4, 5, seed=10):  # statistics gathered before the load are forgotten by it
        resumed.buffer.extend(step)
    resumed.prepare(resumed.buffer.sample(1))
    load_checkpoint(path, resumed)
    assert float(resumed.reward_scale.scale) == 1.0 and float(resumed.reward_scale.returns.count) == 0.0
    with pytest.raises(CheckpointError, match="was trained on the value support"):  # raw atoms
        load_checkpoint(path, _agent())


def test_support_is_fixed_by_normalized_v_max_and_off_means_scale_one() -> None:
    """With normalisation the critics' atoms span ±normalized_v_max; without, v_min..v_max and scale 1."""
    on = _agent(v_min=-500.0, v_max=900.0)
    assert (float(on.model.qf.q_support[0]), float(on.model.qf.q_support[-1])) == (-6.0, 6.0)
    off = make_agent(TINY_SHARED_DIMS, tiny_config(v_min=-500.0, v_max=900.0), "cpu", num_envs=4)
    assert (float(off.model.qf.q_support[0]), float(off.model.qf.q_support[-1])) == (-500.0, 900.0)
    for step in _steps(4, 20, seed=11):
        off.buffer.extend(step)
    raw = off.buffer.sample(2)
    assert torch.equal(off.prepare(raw).rewards, raw.rewards) and float(off.update(4)["reward_scale"]) == 1.0


_RANK = """
import datetime, sys
import torch, torch.distributed as dist
from fastsac_core._distributed import sync_reward_scale
from fastsac_core._reward_scale import RewardScale
sys.path.insert(0, sys.argv[4])
from test_reward_scale import _two_rank_steps, CHUNKS
rank, init, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2,
                        timeout=datetime.timedelta(seconds=60))
try:
    rewards, ended = _two_rank_steps()
    mine = slice(2 * rank, 2 * rank + 2)
    scale = RewardScale(2, 0.9, 3.0, enabled=True)
    for chunk in CHUNKS:
        scale.observe(rewards[chunk, mine], ended[chunk, mine])
        sync_reward_scale(scale)
    torch.save({"scale": scale.scale, "peak": scale.peak, **scale.returns.state_dict()}, out)
finally:
    dist.destroy_process_group()
"""

CHUNKS = [slice(0, 7), slice(7, 20), slice(20, 31)]


def _two_rank_steps() -> tuple[torch.Tensor, torch.Tensor]:
    """31 steps of 4 envs; envs 2 and 3 (rank 1's) pay ten times more, so the ranks' statistics differ."""
    g = torch.Generator().manual_seed(5)
    rewards = 1.0 + torch.randn(31, 4, generator=g)
    rewards[:, 2:] *= 10.0
    return rewards, torch.rand(31, 4, generator=g) < 0.1


def _observed(columns: slice) -> dict[str, torch.Tensor]:
    from fastsac_core._distributed import sync_reward_scale
    from fastsac_core._reward_scale import RewardScale

    rewards, ended = _two_rank_steps()
    width = columns.stop - columns.start
    scale = RewardScale(width, 0.9, 3.0, enabled=True)
    for chunk in CHUNKS:
        scale.observe(rewards[chunk, columns], ended[chunk, columns])
        sync_reward_scale(scale)
    return {"scale": scale.scale, "peak": scale.peak, **scale.returns.state_dict()}


@pytest.mark.slow
def test_two_gloo_ranks_merge_into_the_scale_of_one_process_seeing_every_env(tmp_path: Path) -> None:
    """sync_reward_scale over 2 gloo ranks (2 envs each) gives both the scale of 1 process with all 4 envs."""
    import sys

    here = str(Path(__file__).parent)
    ranks = [[str(r), str(tmp_path / "rdzv"), str(tmp_path / f"{r}.pt"), here] for r in range(2)]
    assert run_processes([[sys.executable, "-c", _RANK, *rank] for rank in ranks]) == [0, 0]
    single = _observed(slice(0, 4))
    alone = _observed(slice(0, 2))
    assert not torch.allclose(alone["scale"], single["scale"]), "rank 0's envs alone give another scale"
    for r in range(2):
        rank = torch.load(tmp_path / f"{r}.pt", weights_only=True)
        assert rank.keys() == single.keys()
        for key, value in single.items():
            torch.testing.assert_close(rank[key], value, atol=1e-12, rtol=1e-12, msg=key)
