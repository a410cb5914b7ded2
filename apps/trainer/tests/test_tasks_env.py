"""MujocoBatchedEnv: dims, auto-reset, time limit, final obs, determinism, random actions."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from fastsac_trainer.tasks import (
    TASKS,
    MujocoBatchedEnv,
    MujocoEnvFactory,
    TaskError,
    env_seeds,
    get_task,
    probe_dims,
)

# (obs_dim, act_dim) from the gymnasium v5 docs.
EXPECTED_DIMS = {
    "humanoid": (348, 17),
    "ant": (105, 8),
    "halfcheetah": (17, 6),
    "hopper": (11, 3),
    "walker2d": (17, 6),
    "pendulum": (4, 1),
}


@pytest.mark.parametrize("name", sorted(EXPECTED_DIMS))
def test_probe_dims_match_the_gymnasium_task(name: str) -> None:
    """Each task's probed dims equal the gymnasium spaces; critic obs equals obs."""
    dims = probe_dims(get_task(name).env_factory())
    obs_dim, act_dim = EXPECTED_DIMS[name]
    assert (dims.obs_dim, dims.critic_obs_dim, dims.act_dim) == (obs_dim, obs_dim, act_dim)
    assert len(dims.action_low) == len(dims.action_high) == act_dim
    assert all(lo < hi for lo, hi in zip(dims.action_low, dims.action_high, strict=True))


def test_every_registered_task_has_expected_dims() -> None:
    """The registry holds exactly the tasks this test knows the dimensions of."""
    assert set(TASKS) == set(EXPECTED_DIMS)


def test_construction_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    """Building HalfCheetah (whose XML uses the deprecated settotalmass) writes nothing to stderr."""
    MujocoBatchedEnv("HalfCheetah-v5", 2, 0).close()
    out, err = capfd.readouterr()
    assert "settotalmass" not in err + out
    assert err == ""


def test_truncation_at_max_episode_steps() -> None:
    """HalfCheetah (never terminates) truncates every env exactly at the limit and auto-resets."""
    limit = 7
    with MujocoBatchedEnv("HalfCheetah-v5", 3, 0, max_episode_steps=limit) as env:
        env.reset()
        for t in range(1, 2 * limit + 1):
            res = env.step(env.sample_actions())
            ended = t % limit == 0
            assert res.truncated.tolist() == [ended] * 3
            assert not res.terminated.any()
            assert res.episode_lengths.tolist() == ([limit] * 3 if ended else [])


def test_final_obs_is_the_obs_before_reset() -> None:
    """An ended env reports its true last obs in final_obs and a fresh reset obs in obs."""
    limit = 5
    actions = np.random.default_rng(3).uniform(-1, 1, size=(limit, 2, 6)).astype(np.float32)
    with (
        MujocoBatchedEnv("HalfCheetah-v5", 2, 11, max_episode_steps=limit) as env,
        MujocoBatchedEnv("HalfCheetah-v5", 2, 11, max_episode_steps=limit + 1) as twin,
    ):
        env.reset()
        twin.reset()
        for t in range(limit):
            res = env.step(actions[t])
            twin_res = twin.step(actions[t])
        # The twin's limit is one step longer, so its obs is the un-reset last obs.
        np.testing.assert_array_equal(res.final_obs, twin_res.obs)
        assert not np.array_equal(res.obs, res.final_obs)


def test_termination_reports_returns_and_resets() -> None:
    """Hopper under random actions terminates; returns and lengths match a per-env tally."""
    with MujocoBatchedEnv("Hopper-v5", 4, 2) as env:
        env.reset()
        tally = np.zeros(4)
        steps = np.zeros(4, dtype=np.int64)
        seen = 0
        for _ in range(300):
            res = env.step(env.sample_actions())
            tally += res.rewards
            steps += 1
            done = res.terminated | res.truncated
            assert not (res.terminated & res.truncated).any()
            np.testing.assert_allclose(res.episode_returns, tally[done], rtol=1e-5)
            np.testing.assert_array_equal(res.episode_lengths, steps[done])
            tally[done] = 0.0
            steps[done] = 0
            seen += int(done.sum())
        assert seen > 0
        assert res.terminated.dtype == np.bool_ and res.rewards.dtype == np.float32


def test_same_seed_same_trajectory() -> None:
    """Two batches with the same seed produce identical obs, rewards and random actions."""

    def rollout(seed: int) -> tuple[np.ndarray, np.ndarray]:
        with MujocoBatchedEnv("Hopper-v5", 3, seed, max_episode_steps=20) as env:
            obs, _ = env.reset()
            trace, rewards = [obs.copy()], []
            for _ in range(60):
                res = env.step(env.sample_actions())
                trace.append(res.obs.copy())
                rewards.append(res.rewards.copy())
            return np.stack(trace), np.stack(rewards)

    a, b, c = rollout(5), rollout(5), rollout(6)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])


def test_envs_of_a_batch_start_differently() -> None:
    """Env seeds are distinct within a batch and across nearby base seeds."""
    seeds = env_seeds(0, 64) + env_seeds(1, 64)
    assert len(set(seeds)) == len(seeds)
    with MujocoBatchedEnv("Hopper-v5", 2, 0) as env:
        obs, critic_obs = env.reset()
        assert obs is critic_obs
        assert not np.array_equal(obs[0], obs[1])


def test_random_actions_within_bounds_and_batched() -> None:
    """sample_actions gives an (N, act_dim) float32 batch inside the bounds that covers the range."""
    with MujocoBatchedEnv("Humanoid-v5", 4, 0) as env:
        low = np.array(env.dims.action_low, dtype=np.float32)
        high = np.array(env.dims.action_high, dtype=np.float32)
        draws = np.stack([env.sample_actions() for _ in range(200)])
        assert draws.shape == (200, 4, env.dims.act_dim) and draws.dtype == np.float32
        assert (draws >= low).all() and (draws <= high).all()
        assert draws.min() < low[0] * 0.95 and draws.max() > high[0] * 0.95


def test_obs_of_previous_step_survives_the_next_step() -> None:
    """The obs returned by step t is unchanged after step t+1 (double buffering)."""
    with MujocoBatchedEnv("Hopper-v5", 2, 0) as env:
        env.reset()
        first = env.step(env.sample_actions()).obs
        kept = first.copy()
        second = env.step(env.sample_actions()).obs
        np.testing.assert_array_equal(first, kept)
        assert not np.array_equal(second, kept)


def test_bad_inputs_raise_named_errors() -> None:
    """Wrong action shapes, stepping before reset and bad sizes raise TaskError naming the value."""
    with pytest.raises(TaskError, match="num_envs=0"):
        MujocoBatchedEnv("Hopper-v5", 0, 0)
    with MujocoBatchedEnv("Hopper-v5", 2, 0) as env:
        with pytest.raises(TaskError, match="before reset"):
            env.step(env.sample_actions())
        env.reset()
        with pytest.raises(TaskError, match=r"\(3, 3\)"):
            env.step(np.zeros((3, 3), np.float32))


def test_factory_pickles_and_builds_the_shard() -> None:
    """MujocoEnvFactory survives pickling and builds num_envs envs of its task."""
    factory = pickle.loads(pickle.dumps(MujocoEnvFactory(env_id="Hopper-v5", max_episode_steps=9)))
    env = factory(3, 1)
    try:
        assert isinstance(env, MujocoBatchedEnv)
        assert (env.num_envs, env.max_episode_steps, env.env_id) == (3, 9, "Hopper-v5")
    finally:
        env.close()


@pytest.mark.parametrize("name", ["pendulum", "humanoid"])
def test_a_batch_restored_from_its_saved_state_steps_exactly_as_the_original(name: str) -> None:
    """save_state, a file, restore_state in a new batch: the next steps (resets too) are bit-identical."""
    import io

    import torch

    factory = get_task(name).env_factory(max_episode_steps=12)
    original = factory(3, 5)
    original.reset()
    actions = [original.sample_actions() for _ in range(40)]
    for a in actions[:15]:
        original.step(a)
    saved = io.BytesIO()
    torch.save(original.save_state(), saved)  # what the replay file does with it
    saved.seek(0)
    expected = []
    for a in actions[15:]:
        r = original.step(a)
        expected.append((r.obs.copy(), r.rewards.copy(), r.terminated.copy(), r.truncated.copy()))
    assert any(t.any() or c.any() for *_, t, c in expected), "episodes end within the window"
    restored = factory(3, 99)
    restored.restore_state(torch.load(saved, weights_only=True))
    for a, (obs, rewards, terminated, truncated) in zip(actions[15:], expected, strict=True):
        r = restored.step(a)
        assert np.array_equal(r.obs, obs) and np.array_equal(r.rewards, rewards)
        assert np.array_equal(r.terminated, terminated) and np.array_equal(r.truncated, truncated)
    assert np.array_equal(restored.sample_actions(), original.sample_actions())
    with pytest.raises(TaskError, match=r"saved env state is of 3 x .*resume with the task"):
        factory(2, 5).restore_state(original.save_state() or {})


def test_envs_kept_with_their_wrappers_save_no_state() -> None:
    """A user's env kept with its wrappers (task=gym) has state out of reach: save_state is None."""
    env = MujocoBatchedEnv("InvertedPendulum-v5", 1, 0, keep_wrappers=True)
    env.reset()
    assert env.save_state() is None
