"""The built-in tasks' batched step (Note [native step]) gives gymnasium's own results, bit for bit."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from fastsac_trainer.tasks import MujocoBatchedEnv
from fastsac_trainer.tasks._native_step import native_step, plain_env

# A user's env whose registration wraps a built-in class in a wrapper that changes its rewards.
gym.register(
    id="NativeStepScaledHopper-v0",
    entry_point=lambda: gym.wrappers.TransformReward(gym.make("Hopper-v5").unwrapped, lambda r: 2.0 * r),
    max_episode_steps=50,
)

# Each env with its defaults, then with settings of every kind its step reads (weights, ranges, flags).
CASES = [
    ("Humanoid-v5", {}),
    (
        "Humanoid-v5",
        {
            "exclude_current_positions_from_observation": False,
            "include_cinert_in_observation": False,
            "include_qfrc_actuator_in_observation": False,
            "contact_cost_range": (-1.0, 0.002),
            "healthy_z_range": (1.1, 1.9),
            "ctrl_cost_weight": 0.3,
            "forward_reward_weight": 2.0,
        },
    ),
    ("Humanoid-v5", {"include_cvel_in_observation": False, "include_cfrc_ext_in_observation": False}),
    ("Ant-v5", {}),
    (
        "Ant-v5",
        {
            "include_cfrc_ext_in_observation": False,
            "contact_force_range": (-0.2, 0.3),
            "contact_cost_weight": 1e-2,
            "healthy_z_range": (0.35, 0.9),
            "main_body": 2,
        },
    ),
    ("HalfCheetah-v5", {}),
    ("HalfCheetah-v5", {"exclude_current_positions_from_observation": False, "ctrl_cost_weight": 0.5}),
    ("Hopper-v5", {}),
    ("Hopper-v5", {"healthy_state_range": (-2.0, 2.0), "healthy_angle_range": (-0.1, 0.1)}),
    ("Hopper-v5", {"terminate_when_unhealthy": False, "healthy_reward": 3.0}),
    ("Walker2d-v5", {}),
    ("Walker2d-v5", {"healthy_angle_range": (-0.3, 0.3), "healthy_z_range": (0.9, 1.8)}),
]


def _steps(env: MujocoBatchedEnv, actions: np.ndarray) -> list[tuple[np.ndarray, ...]]:
    """Every step's arrays (copied: the batch reuses them), after a reset."""
    env.reset()
    out = []
    for step_actions in actions:
        r = env.step(step_actions)
        arrays = (r.obs, r.rewards, r.terminated, r.truncated, r.episode_returns)
        out.append(tuple(a.copy() for a in arrays))
    return out


KEPT = [("Humanoid-v5", {}), ("Hopper-v5", {"healthy_reward": 2.0}), ("Walker2d-v5", {})]


@pytest.mark.parametrize(
    ("env_id", "kwargs", "keep_wrappers"),
    [(*case, False) for case in CASES] + [(*case, True) for case in KEPT],
    ids=[f"{e}-{i}" for i, (e, _) in enumerate(CASES)] + [f"{e}-kept-wrappers" for e, _ in KEPT],
)
def test_the_batched_step_equals_gymnasiums_step(
    env_id: str, kwargs: dict[str, Any], keep_wrappers: bool
) -> None:
    """Random actions (falls, resets, time limits): obs, rewards, flags and returns are gymnasium's exactly.

    With kept wrappers (``task=gym``) the time limit is the registered TimeLimit's in gymnasium's step
    and the batch's own count in the batched one.
    """
    settings: dict[str, Any] = {"env_kwargs": kwargs, "max_episode_steps": 25, "keep_wrappers": keep_wrappers}
    native = MujocoBatchedEnv(env_id, 6, seed=3, **settings)
    # The same batch, stepped through gymnasium's own step.
    stepped = MujocoBatchedEnv(env_id, 6, seed=3, batched_step=False, **settings)
    assert native._native is not None, "the built-in envs take the batched step"
    try:
        # Beyond the bounds too: both clip the same way before the physics.
        rng = np.random.default_rng(0)
        low, high = native.dims.action_low, native.dims.action_high
        shape = (150, 6, len(low))
        actions = rng.uniform(np.array(low) * 1.2, np.array(high) * 1.2, shape).astype(np.float32)
        ours, theirs = _steps(native, actions), _steps(stepped, actions)
    finally:
        native.close()
        stepped.close()
    falls, limits = (sum(int(step[k].sum()) for step in theirs) for k in (2, 3))
    assert falls + limits > 0, "episodes ended and were reset within the steps compared"
    assert limits > 0 or not keep_wrappers, "the batch's count of a kept TimeLimit's limit was compared"
    for t, (mine, gyms) in enumerate(zip(ours, theirs, strict=True)):
        names = ("obs", "rewards", "terminated", "truncated", "returns")
        for name, a, b in zip(names, mine, gyms, strict=True):
            where = np.argwhere(a != b)[:3].tolist() if a.shape == b.shape else "shapes"
            assert a.dtype == b.dtype and np.array_equal(a, b), f"step {t}: {name} differs at {where}"


def test_other_envs_and_windows_are_stepped_by_gymnasium() -> None:
    """No batched step for another env, a subclass, a wrapper changing steps, or one drawing in a window."""
    pendulum = MujocoBatchedEnv("InvertedPendulum-v5", 2, seed=0)
    scaled = MujocoBatchedEnv("NativeStepScaledHopper-v0", 2, seed=0, keep_wrappers=True)
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
    limited.close()
    hopper = gym.make("Hopper-v5").unwrapped
    sub = type("MyHopper", (type(hopper),), {})()
    try:
        assert native_step([hopper]) is not None
        assert native_step([sub]) is None and native_step([hopper, sub]) is None
        hopper.render_mode = "human"
        assert native_step([hopper]) is None
    finally:
        hopper.close()
        sub.close()
