"""The built-in tasks' batched step (Note [native step]) gives gymnasium's own results, bit for bit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from fastsac_trainer.tasks import MujocoBatchedEnv
from fastsac_trainer.tasks._native_step import native_step, plain_env

# Each env with its defaults, then with every setting its step reads changed (weights, ranges, flags,
# frame_skip), chosen so that each one decides something within the steps compared (the z range where
# the angle range does not trip first, say), then the flags the first change could not.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("Humanoid-v5", {}),
    (
        "Humanoid-v5",
        {
            "forward_reward_weight": 2.0,
            "ctrl_cost_weight": 0.3,
            "contact_cost_weight": 2e-6,
            "contact_cost_range": (-1.0, 0.05),
            "healthy_reward": 3.0,
            "healthy_z_range": (1.1, 1.9),
            "frame_skip": 4,
            "exclude_current_positions_from_observation": False,
            "include_cinert_in_observation": False,
            "include_qfrc_actuator_in_observation": False,
        },
    ),
    (
        "Humanoid-v5",
        {
            "terminate_when_unhealthy": False,
            "include_cvel_in_observation": False,
            "include_cfrc_ext_in_observation": False,
        },
    ),
    ("Ant-v5", {}),
    (
        "Ant-v5",
        {
            "forward_reward_weight": 1.5,
            "ctrl_cost_weight": 0.7,
            "contact_cost_weight": 1e-2,
            "contact_force_range": (-0.2, 0.3),
            "healthy_reward": 2.0,
            "healthy_z_range": (0.35, 0.9),
            "main_body": "aux_1",  # a leg's first link: it moves unlike the torso
            "frame_skip": 4,
            "exclude_current_positions_from_observation": False,
        },
    ),
    ("Ant-v5", {"include_cfrc_ext_in_observation": False, "terminate_when_unhealthy": False}),
    ("HalfCheetah-v5", {}),
    (
        "HalfCheetah-v5",
        {
            "forward_reward_weight": 2.0,
            "ctrl_cost_weight": 0.5,
            "frame_skip": 4,
            "exclude_current_positions_from_observation": False,
        },
    ),
    ("Hopper-v5", {}),
    (
        "Hopper-v5",
        {
            "forward_reward_weight": 2.0,
            "ctrl_cost_weight": 0.01,
            "healthy_reward": 3.0,
            "healthy_z_range": (1.0, 1.6),  # the angle range below is wide: z decides
            "healthy_angle_range": (-1.0, 1.0),
            "frame_skip": 3,
            "exclude_current_positions_from_observation": False,
        },
    ),
    ("Hopper-v5", {"healthy_state_range": (-2.0, 2.0), "healthy_angle_range": (-0.1, 0.1)}),
    ("Hopper-v5", {"terminate_when_unhealthy": False}),
    ("Walker2d-v5", {}),
    (
        "Walker2d-v5",
        {
            "forward_reward_weight": 2.0,
            "ctrl_cost_weight": 0.01,
            "healthy_reward": 2.0,
            "healthy_z_range": (0.9, 1.8),  # the angle range below is wide: z decides
            "healthy_angle_range": (-1.5, 1.5),
            "frame_skip": 3,
            "exclude_current_positions_from_observation": False,
        },
    ),
    ("Walker2d-v5", {"healthy_angle_range": (-0.3, 0.3), "terminate_when_unhealthy": False}),
]
KEPT = [("Humanoid-v5", {}), ("Hopper-v5", {"healthy_reward": 2.0}), ("Walker2d-v5", {})]
NAMES = ("obs", "rewards", "terminated", "truncated", "returns", "lengths", "final obs of the ended")
STEPS, ENVS = 150, 6


def _batch(env_id: str, batched: bool, n: int = ENVS, **settings: Any) -> MujocoBatchedEnv:
    """A batch of ``env_id``; ``batched=False``: the same, stepped through gymnasium's own step."""
    batch = MujocoBatchedEnv(env_id, n, seed=3, max_episode_steps=25, batched_step=batched, **settings)
    assert (batch._native is not None) == batched, "the five envs take the batched step"
    return batch


def _actions(batch: MujocoBatchedEnv, steps: int = STEPS) -> np.ndarray:
    """Random actions, beyond the bounds too (both paths clip them the same way before the physics)."""
    low, high = np.array(batch.dims.action_low), np.array(batch.dims.action_high)
    shape = (steps, batch.num_envs, len(low))
    return np.random.default_rng(0).uniform(low * 1.2, high * 1.2, shape).astype(np.float32)


def _steps(batch: MujocoBatchedEnv, actions: np.ndarray, reset: bool = True) -> list[tuple[np.ndarray, ...]]:
    """Every step's arrays (copied: the batch reuses them)."""
    if reset:
        batch.reset()
    out = []
    for step_actions in actions:
        r = batch.step(step_actions)
        ended = r.terminated | r.truncated
        arrays = (r.obs, r.rewards, r.terminated, r.truncated, r.episode_returns, r.episode_lengths)
        out.append((*(a.copy() for a in arrays), r.final_obs[ended].copy()))
    return out


def _assert_equal(ours: list[tuple[np.ndarray, ...]], theirs: list[tuple[np.ndarray, ...]]) -> None:
    for t, (mine, gyms) in enumerate(zip(ours, theirs, strict=True)):
        for name, a, b in zip(NAMES, mine, gyms, strict=True):
            where = np.argwhere(a != b)[:3].tolist() if a.shape == b.shape else "shapes"
            assert a.dtype == b.dtype and np.array_equal(a, b), f"step {t}: {name} differs at {where}"


@pytest.mark.parametrize(
    ("env_id", "kwargs", "keep_wrappers"),
    [(*case, False) for case in CASES] + [(*case, True) for case in KEPT],
    ids=[f"{e}-{i}" for i, (e, _) in enumerate(CASES)] + [f"{e}-kept-wrappers" for e, _ in KEPT],
)
def test_the_batched_step_equals_gymnasiums_step(
    env_id: str, kwargs: dict[str, Any], keep_wrappers: bool
) -> None:
    """Random actions (falls, resets, time limits): every array a step returns is gymnasium's exactly.

    With kept wrappers (``task=gym``) the time limit is the registered TimeLimit's in gymnasium's step
    and the batch's own count in the batched one. A case with changed settings must change what
    gymnasium returns, or it would test nothing.
    """
    settings = {"env_kwargs": kwargs, "keep_wrappers": keep_wrappers}
    batches = [_batch(env_id, True, **settings), _batch(env_id, False, **settings)]
    if kwargs:  # and the same env with its defaults, stepped by gymnasium
        batches.append(_batch(env_id, False, keep_wrappers=keep_wrappers))
    try:
        actions = _actions(batches[0])
        ours, theirs, *defaults = (_steps(batch, actions) for batch in batches)
        plain = defaults[0] if defaults else theirs
    finally:
        for batch in batches:
            batch.close()
    falls, limits = (sum(int(step[k].sum()) for step in theirs) for k in (2, 3))
    assert falls + limits > 0, "episodes ended and were reset within the steps compared"
    assert limits > 0 or not keep_wrappers, "the batch's count of a kept TimeLimit's limit was compared"
    if kwargs:
        changed = any(
            a.shape != b.shape or not np.array_equal(a, b)
            for mine, default_step in zip(theirs, plain, strict=True)
            for a, b in zip(mine[:3], default_step[:3], strict=True)
        )
        assert changed, "the changed settings change what gymnasium's step returns"
    _assert_equal(ours, theirs)


@pytest.mark.parametrize("env_id", ["Humanoid-v5", "Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"])
def test_one_env_and_a_restored_batch_step_as_gymnasium(env_id: str) -> None:
    """A batch of one env (the probe's), and batches restored from a saved state, step as gymnasium's."""
    one = [_batch(env_id, batched, n=1) for batched in (True, False)]
    source = _batch(env_id, True)
    restored = [_batch(env_id, batched) for batched in (True, False)]
    try:
        actions = _actions(one[0], 60)
        _assert_equal(_steps(one[0], actions), _steps(one[1], actions))
        more = _actions(source, 100)
        _steps(source, more[:30])
        state = source.save_state()
        assert state is not None
        for batch in restored:
            batch.restore_state(state)
        _assert_equal(*(_steps(batch, more[30:], reset=False) for batch in restored))
    finally:
        for batch in (*one, source, *restored):
            batch.close()


def _bounds(env_id: str, env: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """States at each bound of ``env``'s health rule, and just inside and outside it: (qpos, qvel) each."""
    qpos, qvel = env.init_qpos.copy(), env.init_qvel.copy()
    states = []

    def at(index: int, values: tuple[float, ...], of: str = "qpos") -> None:
        for value in values:
            for nudge in (0.0, 1e-9, -1e-9):
                p, v = qpos.copy(), qvel.copy()
                (p if of == "qpos" else v)[index] = value + nudge
                states.append((p, v))

    z, angle = (2, None) if env_id in ("Humanoid-v5", "Ant-v5") else (1, 2)
    at(z, env._healthy_z_range)
    if angle is not None:
        at(angle, env._healthy_angle_range)
    if env_id == "Hopper-v5":
        at(3, env._healthy_state_range)  # qpos[2:] and qvel are its state
        at(1, env._healthy_state_range, of="qvel")
    if env_id == "Ant-v5":
        p, v = qpos.copy(), qvel.copy()
        p[z], v[0] = sum(env._healthy_z_range) / 2, np.nan
        states.append((p, v))  # within the z range, but not finite: unhealthy
    return states


@pytest.mark.parametrize("env_id", ["Humanoid-v5", "Ant-v5", "Hopper-v5", "Walker2d-v5"])
def test_the_health_rules_hold_at_their_bounds(env_id: str) -> None:
    """At, just inside and just outside every health bound, the batch judges as the env's is_healthy."""
    env = gym.make(env_id, healthy_z_range=(0.9, 1.4)).unwrapped  # finite bounds on both sides
    states = _bounds(env_id, env)
    native = native_step([env] * len(states))
    assert native is not None
    expected = []
    for i, (qpos, qvel) in enumerate(states):
        env.data.qpos[:], env.data.qvel[:] = qpos, qvel
        expected.append(bool(env.is_healthy))
        native.after["qpos"][i], native.after["qvel"][i] = qpos, qvel
    env.close()
    assert native.healthy().tolist() == expected
    assert 0 < sum(expected) < len(expected), "both sides of the bounds were judged"


@pytest.fixture
def scaled_hopper() -> Iterator[str]:
    """A user's env whose registration wraps a built-in class in a wrapper that changes its rewards."""
    env_id = "NativeStepScaledHopper-v0"
    gym.register(
        id=env_id,
        entry_point=lambda: gym.wrappers.TransformReward(gym.make("Hopper-v5").unwrapped, lambda r: 2.0 * r),
        max_episode_steps=50,
    )
    try:
        yield env_id
    finally:
        del gym.registry[env_id]


def test_other_envs_and_windows_are_stepped_by_gymnasium(scaled_hopper: str) -> None:
    """No batched step for another env, a subclass, a patched class or env, a reward wrapper, or a window."""
    pendulum = MujocoBatchedEnv("InvertedPendulum-v5", 2, seed=0)
    scaled = MujocoBatchedEnv(scaled_hopper, 2, seed=0, keep_wrappers=True)
    try:
        assert pendulum._native is None and scaled._native is None
        scaled.reset()
        assert scaled.step(np.zeros((2, 3), np.float32)).rewards[0] > 1.9, "its wrapper doubles the reward"
    finally:
        pendulum.close()
        scaled.close()
    limited = gym.make("Hopper-v5", max_episode_steps=7)
    assert plain_env(limited) == (limited.unwrapped, 7), "gymnasium's own wrappers: the env and its limit"
    assert plain_env(gym.wrappers.ClipReward(limited, 0.0, 1.0)) is None
    hopper = limited.unwrapped
    sub = type("MyHopper", (type(hopper),), {})()
    try:
        assert native_step([hopper]) is not None
        assert native_step([sub]) is None and native_step([hopper, sub]) is None
        hopper._get_obs = lambda: np.zeros(11)  # patched on the instance
        assert native_step([hopper]) is None
        del hopper._get_obs
        hopper.render_mode = "human"
        assert native_step([hopper]) is None
    finally:
        limited.close()
        sub.close()


def test_a_patched_class_and_an_unreadable_setting_leave_the_step_to_gymnasium(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A patched class, a Humanoid flag that is no bool, an Ant main_body naming no body: gymnasium steps."""
    from gymnasium.envs.mujoco.walker2d_v5 import Walker2dEnv

    walker = gym.make("Walker2d-v5").unwrapped
    monkeypatch.setattr(Walker2dEnv, "is_healthy", property(lambda self: True))
    assert native_step([walker]) is None
    monkeypatch.undo()
    assert native_step([walker]) is not None
    walker.close()
    odd = gym.make("Humanoid-v5", include_cinert_in_observation=1).unwrapped  # not a bool: gymnasium's own
    assert native_step([odd]) is None
    odd.close()
    ant = MujocoBatchedEnv("Ant-v5", 2, seed=0, env_kwargs={"main_body": "no-such-body"})
    try:
        assert ant._native is None
        ant.reset()
        with pytest.raises(KeyError, match="no-such-body"):  # the env's own step, in its words
            ant.step(ant.sample_actions())
    finally:
        ant.close()
