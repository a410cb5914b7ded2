"""Batched steps of gymnasium's v5 MuJoCo locomotion envs, without gymnasium's Python per env.

# Note [native step]
A gymnasium MuJoCo env's ``step`` is MuJoCo's physics (``mj_step``, ``mj_rnePostConstraint``) plus
Python around it: the centre of mass twice, the observation concatenated, the reward terms, an info
dict; a sizeable share of a step on these envs (the figures: ``wiki/benchmarks.md``, Environments).
A collector steps 32 or more envs in one loop, so the batch
(:class:`~fastsac_trainer.tasks._mujoco_env.MujocoBatchedEnv`) steps the physics of each env and
copies the MuJoCo arrays the task reads into (N, ...) arrays, then computes every env's observation,
reward and termination at once with numpy, the way the env's own ``step`` does: the same MuJoCo
calls on the same ``MjData``, the same arithmetic in the same order and dtypes, so the results are
the env's own, bit for bit (``test_native_step.py`` steps both side by side, every setting the step
reads changed too). The settings are read from each env's own attributes (``_forward_reward_weight``,
``_healthy_z_range``...), so ``task.env_kwargs`` hold as in gymnasium. Resets, the env state,
rendering and everything else stay gymnasium's; the info dict is not built (the batch never returned
it). Only what was checked takes it (:func:`native_step`, else gymnasium steps the envs): these five
classes exactly, of the gymnasium version the batched steps were written against
(:data:`CHECKED_GYMNASIUM`), with none of the methods a step calls replaced (a subclass, a patched
class or instance), no env drawing in a window, and settings the batched step can read (else the
env's own step reports them). A user's env kept with its registered wrappers (``task=gym``) is
stepped so too when those wrappers change nothing a step returns but its time limit (gymnasium's own
``TimeLimit``, ``OrderEnforcing`` and ``PassiveEnvChecker``: :func:`plain_env`); the batch then
counts that limit itself, as it does for the built-in tasks.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
import numpy.typing as npt
from gymnasium.envs.mujoco.ant_v5 import AntEnv
from gymnasium.envs.mujoco.half_cheetah_v5 import HalfCheetahEnv
from gymnasium.envs.mujoco.hopper_v5 import HopperEnv
from gymnasium.envs.mujoco.humanoid_v5 import HumanoidEnv
from gymnasium.envs.mujoco.walker2d_v5 import Walker2dEnv
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, TimeLimit

__all__ = ["CHECKED_GYMNASIUM", "NativeStep", "native_step", "plain_env"]

CHECKED_GYMNASIUM = ("1.4.0",)
"""gymnasium versions whose v5 envs' ``step`` the batched steps here were checked against
(``test_native_step.py``); under any other, gymnasium steps the envs."""

__fastsac_env_adapter__ = True
"""This module steps gymnasium's envs for them (``fastsac_core.ADAPTER_MARK``): an exception raised while
it does is never said raised here."""

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]


class NativeStep(abc.ABC):
    """The physics of every env of a batch, then its task's observation, reward and termination at once.

    Args:
        envs: The batch's unwrapped envs, all made alike (one class, one set of settings).
        after: ``MjData`` fields each step copies into an (N, ...) array after the physics.
        before: The same, copied before the physics (the positions a velocity is measured from).
    """

    def __init__(self, envs: Sequence[Any], after: tuple[str, ...], before: tuple[str, ...] = ()) -> None:
        self.env = envs[0]
        """The first env: the settings and the model's constants (every env of a batch is made alike)."""
        self._pairs = [(env.model, env.data, env.frame_skip) for env in envs]
        n = len(envs)
        data = self.env.data
        self.before = {name: np.empty((n, *np.shape(getattr(data, name)))) for name in before}
        """Field name -> its (N, ...) copy from before the last step's physics."""
        self.after = {name: np.empty((n, *np.shape(getattr(data, name)))) for name in after}
        """Field name -> its (N, ...) copy from after the last step's physics."""
        self.n = n

    def physics(self, actions: F32) -> None:
        """Each env's ``do_simulation`` (controls, ``mj_step``, ``mj_rnePostConstraint``) and its copies."""
        before = tuple(self.before.items())
        after = tuple(self.after.items())
        for i, (model, data, frame_skip) in enumerate(self._pairs):
            for name, array in before:
                array[i] = getattr(data, name)
            data.ctrl[:] = actions[i]
            mujoco.mj_step(model, data, nstep=frame_skip)
            mujoco.mj_rnePostConstraint(model, data)
            for name, array in after:
                array[i] = getattr(data, name)

    @abc.abstractmethod
    def __call__(self, actions: F32, obs: F32, rewards: F32, terminated: B) -> None:
        """Step every env with ``actions`` (clipped, float32) and write the step's rows into the arrays."""

    def healthy(self) -> B:
        """Each env's ``is_healthy``, from the copies of the last step (all True where none is judged)."""
        return np.ones(self.n, np.bool_)


def _positions(qpos: F64, exclude: bool, skipped: int) -> F64:
    kept: F64 = qpos[:, skipped:] if exclude else qpos
    return kept


def _ctrl_cost(weight: float, actions: F32) -> Any:
    # The env's np.sum(np.square(action)) of a float32 action stays float32, as does weight times it.
    return weight * np.sum(np.square(actions), axis=1)


_HUMANOID_FLAGS = (
    "_include_cinert_in_observation",
    "_include_cvel_in_observation",
    "_include_qfrc_actuator_in_observation",
    "_include_cfrc_ext_in_observation",
)


class _Humanoid(NativeStep):
    def __init__(self, envs: Sequence[Any]) -> None:
        super().__init__(
            envs,
            after=("qpos", "qvel", "cinert", "cvel", "qfrc_actuator", "cfrc_ext", "xipos", "ctrl"),
            before=("xipos",),
        )
        self._mass = np.expand_dims(self.env.model.body_mass, axis=1)[None]  # mass_center's, per env
        flags = [name for name in _HUMANOID_FLAGS if not isinstance(getattr(self.env, name), bool)]
        if flags:  # gymnasium sizes the observation by the flag and fills it by `is True`: they disagree
            raise TypeError(f"Humanoid-v5's {flags} must be True or False")

    def _xy(self, xipos: F64) -> F64:
        centre: F64 = np.sum(self._mass * xipos, axis=1) / np.sum(self._mass)
        return centre[:, 0:2]

    def __call__(self, actions: F32, obs: F32, rewards: F32, terminated: B) -> None:
        self.physics(actions)
        env, a, n = self.env, self.after, self.n
        velocity = (self._xy(a["xipos"]) - self._xy(self.before["xipos"])) / env.dt
        parts = [_positions(a["qpos"], env._exclude_current_positions_from_observation, 2), a["qvel"]]
        if env._include_cinert_in_observation is True:
            parts.append(a["cinert"][:, 1:].reshape(n, -1))
        if env._include_cvel_in_observation is True:
            parts.append(a["cvel"][:, 1:].reshape(n, -1))
        if env._include_qfrc_actuator_in_observation is True:
            parts.append(a["qfrc_actuator"][:, 6:])
        if env._include_cfrc_ext_in_observation is True:
            parts.append(a["cfrc_ext"][:, 1:].reshape(n, -1))
        obs[:] = np.concatenate(parts, axis=1)
        healthy = self.healthy()
        forward = env._forward_reward_weight * velocity[:, 0]
        ctrl_cost = env._ctrl_cost_weight * np.sum(np.square(a["ctrl"]), axis=1)
        contact_cost = env._contact_cost_weight * np.sum(np.square(a["cfrc_ext"]).reshape(n, -1), axis=1)
        contact_cost = np.clip(contact_cost, *env._contact_cost_range)
        rewards[:] = (forward + healthy * env._healthy_reward) - (ctrl_cost + contact_cost)
        terminated[:] = ~healthy & bool(env._terminate_when_unhealthy)

    def healthy(self) -> B:
        min_z, max_z = self.env._healthy_z_range
        z = self.after["qpos"][:, 2]
        ok: B = (min_z < z) & (z < max_z)
        return ok


class _Ant(NativeStep):
    def __init__(self, envs: Sequence[Any]) -> None:
        super().__init__(envs, after=("qpos", "qvel", "cfrc_ext", "xpos"), before=("xpos",))
        self._body = self.env.model.body(self.env._main_body).id

    def __call__(self, actions: F32, obs: F32, rewards: F32, terminated: B) -> None:
        self.physics(actions)
        env, a, n = self.env, self.after, self.n
        xy_before = self.before["xpos"][:, self._body, :2]
        velocity = (a["xpos"][:, self._body, :2] - xy_before) / env.dt
        contact_forces = np.clip(a["cfrc_ext"], *env._contact_force_range)
        parts = [_positions(a["qpos"], env._exclude_current_positions_from_observation, 2), a["qvel"]]
        if env._include_cfrc_ext_in_observation:
            parts.append(contact_forces[:, 1:].reshape(n, -1))
        obs[:] = np.concatenate(parts, axis=1)
        healthy = self.healthy()
        forward = velocity[:, 0] * env._forward_reward_weight
        contact_cost = env._contact_cost_weight * np.sum(np.square(contact_forces).reshape(n, -1), axis=1)
        costs = _ctrl_cost(env._ctrl_cost_weight, actions) + contact_cost
        rewards[:] = (forward + healthy * env._healthy_reward) - costs
        terminated[:] = ~healthy & bool(env._terminate_when_unhealthy)

    def healthy(self) -> B:
        state = np.concatenate((self.after["qpos"], self.after["qvel"]), axis=1)
        min_z, max_z = self.env._healthy_z_range  # bounds included, unlike the others'
        ok: B = np.isfinite(state).all(axis=1) & (min_z <= state[:, 2]) & (state[:, 2] <= max_z)
        return ok


class _Planar(NativeStep):
    """A body moving along x, observed by qpos (less x) and qvel: HalfCheetah's step, which ends none."""

    clip_velocity: float | None = None
    """The observed velocities' bound (Hopper's and Walker2d's 10); None: unclipped."""

    def __init__(self, envs: Sequence[Any]) -> None:
        super().__init__(envs, after=("qpos", "qvel"), before=("qpos",))

    def observe(self, obs: F32) -> F64:
        """Write the observations; returns the x velocity."""
        env, a, bound = self.env, self.after, self.clip_velocity
        velocity = a["qvel"] if bound is None else np.clip(a["qvel"], -bound, bound)
        positions = _positions(a["qpos"], env._exclude_current_positions_from_observation, 1)
        obs[:] = np.concatenate((positions, velocity), axis=1)
        x_velocity: F64 = (a["qpos"][:, 0] - self.before["qpos"][:, 0]) / env.dt
        return x_velocity

    def __call__(self, actions: F32, obs: F32, rewards: F32, terminated: B) -> None:
        self.physics(actions)
        env = self.env
        x_velocity = self.observe(obs)
        rewards[:] = env._forward_reward_weight * x_velocity - _ctrl_cost(env._ctrl_cost_weight, actions)
        terminated[:] = False


class _Walker2d(_Planar):
    """A planar body that falls: a healthy reward, and an end when it is no longer healthy."""

    clip_velocity = 10.0

    def healthy(self) -> B:
        env, qpos = self.env, self.after["qpos"]
        (min_z, max_z), (min_angle, max_angle) = env._healthy_z_range, env._healthy_angle_range
        z, angle = qpos[:, 1], qpos[:, 2]
        ok: B = (min_z < z) & (z < max_z) & (min_angle < angle) & (angle < max_angle)
        return ok

    def __call__(self, actions: F32, obs: F32, rewards: F32, terminated: B) -> None:
        self.physics(actions)
        env = self.env
        x_velocity = self.observe(obs)
        healthy = self.healthy()
        forward = env._forward_reward_weight * x_velocity
        rewards[:] = (forward + healthy * env._healthy_reward) - _ctrl_cost(env._ctrl_cost_weight, actions)
        terminated[:] = ~healthy & bool(env._terminate_when_unhealthy)


class _Hopper(_Walker2d):
    def healthy(self) -> B:  # Walker2d's rule, and every part of its state within a range
        min_state, max_state = self.env._healthy_state_range
        state = np.concatenate((self.after["qpos"], self.after["qvel"]), axis=1)[:, 2:]
        within: B = np.all((min_state < state) & (state < max_state), axis=1)
        return super().healthy() & within


_NATIVE: dict[type, Callable[[Sequence[Any]], NativeStep]] = {
    HumanoidEnv: _Humanoid,
    AntEnv: _Ant,
    HalfCheetahEnv: _Planar,
    HopperEnv: _Hopper,
    Walker2dEnv: _Walker2d,
}

_STEP_METHODS = (
    "step", "do_simulation", "_step_mujoco_simulation", "_get_obs", "_get_rew", "control_cost",
    "contact_cost", "contact_forces", "healthy_reward", "is_healthy", "state_vector", "dt",
)  # fmt: skip
"""What a step of these classes calls: a class or instance that replaces one is not the checked step."""

_ORIGINAL = {
    kind: {name: getattr(kind, name) for name in _STEP_METHODS if hasattr(kind, name)} for kind in _NATIVE
}


def _as_checked(env: Any, kind: type) -> bool:
    """``env`` is exactly ``kind`` with its step's methods as gymnasium wrote them, and draws in no window."""
    return (
        type(env) is kind
        and getattr(env, "render_mode", None) != "human"  # a window is drawn in step
        and all(getattr(kind, name) is method for name, method in _ORIGINAL[kind].items())
        and not any(name in vars(env) for name in _STEP_METHODS)
    )


def native_step(envs: Sequence[Any]) -> NativeStep | None:
    """The batched step of ``envs`` (unwrapped, made alike), or None when gymnasium must step them.

    None unless gymnasium is a version the batched steps were checked against, every env is exactly
    one of its v5 Humanoid, Ant, HalfCheetah, Hopper or Walker2d classes, unpatched and drawing in no
    window (Note [native step]), and the batched step can read the env's settings (an Ant whose
    ``main_body`` names no body: its own step says so, in the env's words).
    """
    kind = type(envs[0]) if envs else None
    build = _NATIVE.get(kind) if kind is not None else None
    if kind is None or build is None or gym.__version__ not in CHECKED_GYMNASIUM:
        return None
    if not all(_as_checked(env, kind) for env in envs):
        return None
    try:
        return build(envs)
    except Exception:  # a setting it cannot read: gymnasium's step reports it, as the env's own error
        return None


def plain_env(env: Any) -> tuple[Any, int | None] | None:
    """``env`` without the wrappers that change nothing its step returns but the time limit, and that limit.

    Returns:
        ``(the innermost env, its TimeLimit's limit or None)``, or None when another wrapper is in the
        chain (a reward scaler, an observation wrapper: part of a user's task).
    """
    limit = None
    while isinstance(env, gym.Wrapper):
        if type(env) is TimeLimit:
            limit = env._max_episode_steps if limit is None else min(limit, env._max_episode_steps)
        elif type(env) not in (OrderEnforcing, PassiveEnvChecker):
            return None
        env = env.env
    return env, limit
