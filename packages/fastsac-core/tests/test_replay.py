"""Replay buffer: next obs from the next slot, n-step returns, truncation rule, wrap, extend_batch."""

from __future__ import annotations

import pytest
import torch

from fastsac_core import ReplayBuffer, ReplayBufferError, transition_fields

FIELDS = tuple(transition_fields(3, 6, 2))


def _history(steps: int, num_envs: int, seed: int, end_prob: float = 0.2) -> dict[str, torch.Tensor]:
    """Random steps whose obs encode (step, env) so sampled rows can be traced back."""
    g = torch.Generator().manual_seed(seed)
    step = torch.arange(steps, dtype=torch.float32)[:, None].expand(steps, num_envs)
    env = torch.arange(num_envs, dtype=torch.float32)[None, :].expand(steps, num_envs)
    obs = torch.stack([step, env, torch.randn(steps, num_envs, generator=g)], -1)
    terminated = torch.rand(steps, num_envs, generator=g) < end_prob
    truncated = torch.rand(steps, num_envs, generator=g) < end_prob  # some steps are both
    return {
        "obs": obs,
        "critic_obs": torch.cat([obs, -obs], -1),
        "actions": torch.randn(steps, num_envs, 2, generator=g),
        "rewards": torch.randn(steps, num_envs, generator=g),
        "terminated": terminated,
        "truncated": truncated,
    }


def _at(h: dict[str, torch.Tensor], t: int | slice) -> dict[str, torch.Tensor]:
    """Step ``t`` (or the steps of slice ``t``) of a history, as ``extend`` takes it."""
    return {k: v[t] for k, v in h.items()}


def _expected(
    h: dict[str, torch.Tensor], s: int, e: int, n: int, gamma: float, written: int
) -> dict[str, float]:
    """The rule of wiki/algorithm.md, written as a plain loop."""
    terms, truncs, rewards = h["terminated"][:, e], h["truncated"][:, e], h["rewards"][:, e]
    ret, m, terminated = 0.0, 0, False
    for i in range(n):
        t = s + i
        if t > written - 2:  # step t has no next obs yet
            break
        if i > 0 and truncs[t] and not terms[t]:  # stop before a time-limit cut
            break
        ret += gamma**i * float(rewards[t])
        m += 1
        if terms[t] or truncs[t]:
            terminated = bool(terms[t])
            break
    return {
        "rewards": ret,
        "next_step": float(s + m),
        "discount": gamma**m,
        "bootstrap": 0.0 if terminated else 1.0,
        "valid": 0.0 if (truncs[s] and not terms[s]) else 1.0,
    }


@pytest.mark.parametrize(
    ("capacity", "steps", "n_steps"), [(32, 20, 1), (32, 20, 3), (7, 23, 1), (7, 23, 3), (9, 40, 5)]
)
def test_sample_matches_ground_truth(capacity: int, steps: int, n_steps: int) -> None:
    """Each sampled transition (across episode ends and the wrap) equals the hand-computed n-step target."""
    num_envs, gamma = 3, 0.9
    h = _history(steps, num_envs, seed=capacity + steps + n_steps)
    buf = ReplayBuffer(num_envs, capacity, 3, 6, 2, n_steps=n_steps, gamma=gamma)
    for t in range(steps):
        buf.extend(_at(h, t))
    batch = buf.sample(400)
    oldest = steps - min(steps, capacity)
    seen = set()
    for row in range(batch.obs.shape[0]):
        s, e = int(batch.obs[row, 0]), int(batch.obs[row, 1])
        assert row % num_envs == e  # step-major row order
        assert oldest <= s <= steps - 2  # only complete transitions, only data still stored
        seen.add((s, e))
        want = _expected(h, s, e, n_steps, gamma, steps)
        assert float(batch.next_obs[row, 0]) == want["next_step"]
        assert float(batch.next_obs[row, 1]) == e
        torch.testing.assert_close(batch.next_critic_obs[row], h["critic_obs"][int(want["next_step"]), e])
        torch.testing.assert_close(batch.actions[row], h["actions"][s, e])
        assert float(batch.rewards[row]) == pytest.approx(want["rewards"], abs=1e-5)
        assert float(batch.discount[row]) == pytest.approx(want["discount"], rel=1e-6)
        assert float(batch.bootstrap[row]) == want["bootstrap"]
        assert float(batch.valid[row]) == want["valid"]
    # uniform over every complete transition: with 400 draws per env each one shows up
    assert len(seen) == num_envs * (min(steps, capacity) - 1)


def test_truncated_first_step_is_invalid_and_terminated_is_not() -> None:
    """A transition cut by a time limit has weight 0; a terminated one is valid with no bootstrap."""
    buf = ReplayBuffer(2, 8, 1, 1, 1, n_steps=1, gamma=0.5)
    zeros = torch.zeros(2, 1)
    for t in range(3):
        buf.extend(
            {
                "obs": zeros + t,
                "critic_obs": zeros,
                "actions": zeros,
                "rewards": torch.ones(2),
                "terminated": torch.tensor([t == 0, False]),
                "truncated": torch.tensor([False, t == 0]),
            }
        )
    batch = buf.sample(64)
    first = batch.obs[:, 0] == 0
    env0, env1 = torch.arange(batch.obs.shape[0]) % 2 == 0, torch.arange(batch.obs.shape[0]) % 2 == 1
    assert torch.all(batch.valid[first & env0] == 1) and torch.all(batch.bootstrap[first & env0] == 0)
    assert torch.all(batch.valid[first & env1] == 0)
    assert torch.all(batch.valid[~first] == 1) and torch.all(batch.bootstrap[~first] == 1)


def test_extend_batch_equals_repeated_extend_across_the_wrap() -> None:
    """Chunks of k steps (including one longer than the capacity) leave byte-identical storage."""
    num_envs, capacity = 4, 10
    h = _history(60, num_envs, seed=7)
    one, many = (ReplayBuffer(num_envs, capacity, 3, 6, 2, n_steps=3) for _ in range(2))
    start = 0
    for k in (3, 5, 9, 1, 13, 2, 7, 20):
        for t in range(start, start + k):
            one.extend(_at(h, t))
        many.extend_batch(_at(h, slice(start, start + k)))
        start += k
        assert len(one) == len(many) and one.written == many.written
        for key in FIELDS:
            assert one.storage[key].numpy().tobytes() == many.storage[key].numpy().tobytes(), key


def test_errors_name_the_problem() -> None:
    """Sampling an empty buffer and writing a wrong shape raise ReplayBufferError with the numbers."""
    buf = ReplayBuffer(2, 4, 3, 3, 1)
    with pytest.raises(ReplayBufferError, match="0 step"):
        buf.sample(1)
    with pytest.raises(ReplayBufferError, match=r"obs has shape \(1, 2, 5\); expected \(1, 2, 3\)"):
        buf.extend(
            {
                "obs": torch.zeros(2, 5),
                "critic_obs": torch.zeros(2, 3),
                "actions": torch.zeros(2, 1),
                "rewards": torch.zeros(2),
                "terminated": torch.zeros(2, dtype=torch.bool),
                "truncated": torch.zeros(2, dtype=torch.bool),
            }
        )


def test_state_dict_round_trip() -> None:
    """A buffer restored with its data samples the same transitions under the same RNG."""
    h = _history(15, 2, seed=3)
    a = ReplayBuffer(2, 8, 3, 6, 2, n_steps=2)
    a.extend_batch(h)
    b = ReplayBuffer(2, 8, 3, 6, 2, n_steps=2)
    b.load_state_dict(a.state_dict(include_data=True))
    torch.manual_seed(0)
    x = a.sample(5)
    torch.manual_seed(0)
    y = b.sample(5)
    for u, v in zip(x, y, strict=True):
        assert torch.equal(u, v)
    c = ReplayBuffer(2, 8, 3, 6, 2)
    c.load_state_dict(a.state_dict(include_data=False))
    assert len(c) == 0


def test_a_critic_that_observes_obs_shares_its_storage_and_samples() -> None:
    """critic_obs_dim=None: no critic storage, critic fields of a batch are its obs, critic input ignored."""
    h = _history(30, 3, seed=5)
    shared = ReplayBuffer(3, 16, 3, None, 2, n_steps=2)
    own = ReplayBuffer(3, 16, 3, 3, 2, n_steps=2)  # the same data with critic_obs = obs, stored twice
    without_critic = {k: v for k, v in h.items() if k != "critic_obs"}
    shared.extend_batch(without_critic)
    own.extend_batch(without_critic | {"critic_obs": h["obs"]})
    first = _at(h, 0) | {"critic_obs": h["obs"][0]}
    shared.extend(first)  # a critic_obs given anyway is ignored
    own.extend(first)
    assert shared.shared_obs and "critic_obs" not in shared.storage
    assert "critic_obs" not in shared.state_dict()["data"]
    torch.manual_seed(1)
    x = shared.sample(4)
    torch.manual_seed(1)
    y = own.sample(4)
    assert x.critic_obs is x.obs and x.next_critic_obs is x.next_obs
    part = x.narrow(2, 3).to("meta")  # minibatches and moved batches keep the sharing
    assert part.critic_obs is part.obs and part.next_critic_obs is part.next_obs
    for u, v in zip(x, y, strict=True):
        assert torch.equal(u, v)


def test_critic_observation_mismatches_are_named() -> None:
    """A buffer with its own critic_obs refuses None and a shared buffer's checkpoint, naming the fix."""
    h = _history(4, 2, seed=1)
    own = ReplayBuffer(2, 8, 3, 6, 2)
    without_critic = {k: v for k, v in h.items() if k != "critic_obs"}
    with pytest.raises(ReplayBufferError, match=r"critic_obs is missing.*critic_obs_dim=None"):
        own.extend_batch(without_critic)
    shared = ReplayBuffer(2, 8, 3, None, 2)
    shared.extend_batch(without_critic)
    with pytest.raises(ReplayBufferError, match=r"no \['critic_obs'\]"):
        own.load_state_dict(shared.state_dict())


def test_replay_data_saved_with_the_old_flag_names_loads() -> None:
    """A replay state whose flags are named dones/truncations (older checkpoints) restores the same data."""
    h = _history(6, 2, seed=4)
    a = ReplayBuffer(2, 8, 3, 6, 2)
    a.extend_batch(h)
    state = a.state_dict()
    state["data"]["dones"], state["data"]["truncations"] = (
        state["data"].pop("terminated"),
        state["data"].pop("truncated"),
    )
    b = ReplayBuffer(2, 8, 3, 6, 2)
    b.load_state_dict(state)
    for name in FIELDS:
        torch.testing.assert_close(b.storage[name], a.storage[name], equal_nan=True, rtol=0, atol=0)


def _block_steps(h: dict[str, torch.Tensor], lo: int, hi: int, envs: slice) -> dict[str, torch.Tensor]:
    return {k: v[lo:hi, envs] for k, v in h.items()}


@pytest.mark.parametrize(("capacity", "n_steps"), [(32, 1), (32, 3), (7, 3)])
def test_blocks_written_to_different_counts_sample_each_env_from_its_own_steps(
    capacity: int, n_steps: int
) -> None:
    """Ragged blocks: each env samples only its own complete steps, n-step targets exact, all covered."""
    num_envs, gamma, steps = 3, 0.9, (23, 12)  # block 0 (env 0) ahead of block 1 (envs 1-2)
    h = _history(max(steps), num_envs, seed=capacity + n_steps)
    buf = ReplayBuffer(num_envs, capacity, 3, 6, 2, n_steps=n_steps, gamma=gamma, blocks=(1, 2))
    for lo in range(0, max(steps), 5):  # interleaved, in uneven chunks
        for block, envs in ((0, slice(0, 1)), (1, slice(1, 3))):
            hi = min(lo + 5, steps[block])
            if lo < hi:
                buf.extend_block(block, _block_steps(h, lo, hi, envs))
    assert buf.block_written == steps and buf.written == min(steps) and len(buf) == min(*steps, capacity)
    batch = buf.sample(400)
    seen = set()
    for row in range(batch.obs.shape[0]):
        s, e = int(batch.obs[row, 0]), int(batch.obs[row, 1])
        written = steps[0 if e == 0 else 1]
        assert row % num_envs == e
        assert written - min(written, capacity) <= s <= written - 2
        seen.add((s, e))
        want = _expected(h, s, e, n_steps, gamma, written)
        assert float(batch.next_obs[row, 0]) == want["next_step"]
        assert float(batch.rewards[row]) == pytest.approx(want["rewards"], abs=1e-5)
        assert float(batch.discount[row]) == pytest.approx(want["discount"], rel=1e-6)
        assert (float(batch.bootstrap[row]), float(batch.valid[row])) == (want["bootstrap"], want["valid"])
    per_env = [min(steps[0 if e == 0 else 1], capacity) - 1 for e in range(num_envs)]
    assert len(seen) == sum(per_env)


def test_blocks_written_alike_equal_one_batch_write_byte_for_byte() -> None:
    """extend_block of every block to the same count leaves exactly what extend_batch leaves (NaNs too)."""
    h = _history(11, 5, seed=3)
    whole = ReplayBuffer(5, 7, 3, 6, 2)
    parts = ReplayBuffer(5, 7, 3, 6, 2, blocks=(2, 3))
    whole.extend_batch(_at(h, slice(0, 11)))
    parts.extend_block(1, _block_steps(h, 0, 4, slice(2, 5)))
    parts.extend_block(0, _block_steps(h, 0, 11, slice(0, 2)))
    parts.extend_block(1, _block_steps(h, 4, 11, slice(2, 5)))
    for name in FIELDS:
        torch.testing.assert_close(parts.storage[name], whole.storage[name], equal_nan=True, rtol=0, atol=0)
    assert parts.block_written == (11, 11) and parts.written == whole.written == 11
    parts.extend_batch(_at(h, slice(0, 2)))  # equal counts again: a batch write is allowed
    assert parts.block_written == (13, 13)


def test_block_errors_and_state_name_the_problem() -> None:
    """Bad widths, a batch write over uneven blocks, a bad block index; block counts survive a round trip."""
    with pytest.raises(ReplayBufferError, match=r"blocks=\[1, 2\] for num_envs=4"):
        ReplayBuffer(4, 8, 3, 6, 2, blocks=(1, 2))
    buf = ReplayBuffer(3, 8, 3, 6, 2, blocks=(1, 2))
    h = _history(4, 3, seed=1)
    buf.extend_block(0, _block_steps(h, 0, 4, slice(0, 1)))
    with pytest.raises(ReplayBufferError, match="write each block with extend_block"):
        buf.extend_batch(_at(h, slice(0, 1)))
    with pytest.raises(ReplayBufferError, match="block=2"):
        buf.extend_block(2, _block_steps(h, 0, 1, slice(0, 1)))
    with pytest.raises(ReplayBufferError, match="expected"):
        buf.extend_block(1, _block_steps(h, 0, 1, slice(0, 1)))  # block 1 is 2 envs wide
    buf.extend_block(1, _block_steps(h, 0, 2, slice(1, 3)))
    state = buf.state_dict()
    again = ReplayBuffer(3, 8, 3, 6, 2, blocks=(1, 2))
    again.load_state_dict(state)
    assert again.block_written == (4, 2) and again.num_stored == 4 + 2 * 2
    assert not again.sample(8).obs.isnan().any(), "samples come only from written steps"
    with pytest.raises(ReplayBufferError, match=r"blocks \[1, 2\] hold different step counts \[4, 2\]"):
        ReplayBuffer(3, 8, 3, 6, 2, blocks=(2, 1)).load_state_dict(state)
    del state["block_written"], state["blocks"]  # a state saved before blocks existed: one block
    again.load_state_dict(state)
    assert again.block_written == (2, 2)


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:Synchronization debug mode is a prototype:UserWarning")
def test_sampling_uneven_blocks_on_cuda_never_waits_for_the_gpu() -> None:
    """A CUDA buffer with blocks at different counts samples without a host synchronisation."""
    buf = ReplayBuffer(3, 8, 3, 6, 2, device="cuda", blocks=(1, 2))
    h = {k: v.cuda() for k, v in _history(5, 3, seed=2).items()}
    buf.extend_block(0, _block_steps(h, 0, 5, slice(0, 1)))
    buf.extend_block(1, _block_steps(h, 0, 3, slice(1, 3)))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        batch = buf.sample(16)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert not batch.obs.isnan().any()
