"""N gymnasium environments stepped in one process as a :class:`BatchedEnv`.

The built-in MuJoCo tasks step the *unwrapped* gymnasium classes in a plain Python loop: no
vector-env wrapper, no TimeLimit/OrderEnforcing/PassiveEnvChecker chain. Auto-reset, the time
limit, episode statistics and random actions are done here, vectorised with numpy (faster than
``gymnasium.vector.SyncVectorEnv`` on the same envs: ``wiki/benchmarks.md``, Environments). For
gymnasium's v5 Humanoid, Ant, HalfCheetah, Hopper and Walker2d the loop runs only their physics, and
their observations, rewards and terminations are computed for the whole batch at once, as the envs'
own ``step`` computes them (Note [native step] in :mod:`fastsac_trainer.tasks._native_step`). A
user's env (``task=gym``) keeps every wrapper its registration adds (``keep_wrappers=True``): a
reward-scaling or observation wrapper is part of the task, and its TimeLimit's truncation is taken
as it reports it (unless the wrappers are only gymnasium's time limit and checks around one of those
five classes: then the batched step runs and the batch counts the TimeLimit's limit itself).

# Note [obs double buffering]
``step`` writes observations into one of two preallocated float32 arrays, alternating, so
the obs returned by step t is still intact while the caller runs step t+1 (a caller that knows
it has a MujocoBatchedEnv can act on obs_t, step, then store obs_t next to the reward of that
step without copying it first). This is stronger than the BatchedEnv protocol, which keeps step
arrays valid only until the next step. Every other array of a :class:`StepResult` is valid until
the next ``step`` call.

# Note [env state]
``save_state`` keeps what the next steps of the batch depend on, so that a resumed synchronous run
continues every episode bit-identically: each env's MuJoCo integration state (``mj_getState`` with
``mjSTATE_INTEGRATION``: time, qpos, qvel, act, controls, warm start...) and every fixed-size array of
its ``MjData`` (the derived quantities of the last step: some tasks read one before the next step,
e.g. Humanoid's centre of mass from ``xipos``, Ant's torso ``xpos``), its reset generator, the
random-action generator, the episodes' returns and lengths, and the obs last returned. About 35 kB
per Humanoid env. Envs kept with their wrappers (``task=gym``) return None: a wrapper's own state
(a TimeLimit's count, a normaliser's statistics) is out of reach, and their episodes restart.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
import numpy.typing as npt
import torch

from fastsac_core import EnvDims, StepResult
from fastsac_trainer.tasks._native_step import NativeStep, native_step, plain_env
from fastsac_trainer.tasks._quiet import quiet_mujoco_compiler
from fastsac_trainer.tasks.exceptions import EnvProtocolError, EnvSpaceError, TaskError, kwargs_fault

__all__ = ["MujocoBatchedEnv", "check_spaces", "env_seeds"]

__fastsac_env_adapter__ = True
"""This module adapts gymnasium's envs (``fastsac_core.ADAPTER_MARK``): an env's exception is said raised
in the env's code, never in the loop here that called it."""

_log = logging.getLogger(__name__)

F32 = npt.NDArray[np.float32]


def env_seeds(seed: int, num_envs: int) -> list[int]:
    """Distinct, deterministic reset seeds of the ``num_envs`` envs of a batch seeded ``seed``.

    Derived through ``numpy.random.SeedSequence`` so that batches with nearby base seeds (the
    collectors use ``seed + i``) do not share env seeds, which ``seed * 1000 + i`` would do
    once a batch holds 1000 envs.
    """
    state = np.random.SeedSequence([seed, 0]).generate_state(num_envs, dtype=np.uint32)
    return [int(s) for s in state]


def _action_rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, 1])))


def _space_fix(env_id: str, what: str, space: Any) -> TaskError:
    return TaskError(
        f"task.env_id={env_id!r} is invalid: its {what} space is {_space_name(space)}; use an env with "
        "flat Box observations and actions (gymnasium.wrappers.FlattenObservation and a registered "
        "wrapper, or task.env_factory)"
    )


def _space_name(space: Any) -> str:
    """The kind of a space, short: ``Box(3, 4)``, ``Discrete(2)``, ``Dict('observation', 'goal')``."""
    if isinstance(space, gym.spaces.Dict):
        return f"Dict({', '.join(map(repr, space.spaces))})"
    if isinstance(space, gym.spaces.Tuple):
        return f"Tuple of {len(space.spaces)} spaces"
    if isinstance(space, gym.spaces.Box):
        return f"Box{space.shape}"
    return str(space)


def _make_failed(env_id: str, env_kwargs: Mapping[str, Any], error: Exception) -> TaskError:
    """``gymnasium.make(env_id, **env_kwargs)`` raised ``error``: one line blaming the setting at fault.

    An unregistered id is ``task.env_id``'s fault; a keyword the env does not take, ``task.env_kwargs``';
    anything else the env raised while it was made names the env and the error.
    """
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    if isinstance(error, gym.error.Error):
        return TaskError(
            f"task.env_id={env_id!r} is invalid: {first}; use a registered gymnasium id "
            "(gymnasium.pprint_registry() lists them), or task.env_import=MODULE that registers it"
        )
    return kwargs_fault(env_id, env_kwargs, error) or TaskError(
        f"task.env_id={env_id!r} is invalid: making the env failed ({type(error).__name__}: {first}); "
        "fix the env or its settings"
    )


def check_spaces(env_id: str, obs_space: Any, act_space: Any) -> tuple[gym.spaces.Box, gym.spaces.Box]:
    """The two spaces, once they are what the agent can learn: flat Boxes, bounded actions.

    Raises:
        TaskError: One line naming the env, the space seen and the fix.
    """
    for what, space in (("observation", obs_space), ("action", act_space)):
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise _space_fix(env_id, what, space)
    if not (np.all(np.isfinite(act_space.low)) and np.all(np.isfinite(act_space.high))):
        raise TaskError(
            f"task.env_id={env_id!r} is invalid: its action space {act_space} is unbounded; the policy "
            "squashes actions into finite bounds: rescale the actions into a bounded Box with a wrapper"
        )
    return obs_space, act_space


_INTEGRATION = mujoco.mjtState.mjSTATE_INTEGRATION


def _fixed_arrays(data: Any, model: Any) -> dict[str, np.ndarray]:
    """Every array of ``data`` whose shape the model fixes (not the per-step contact/constraint ones)."""
    fresh = mujoco.MjData(model)
    arrays = {}
    for name in dir(data):
        if name.startswith("_"):
            continue
        value = getattr(data, name, None)
        if isinstance(value, np.ndarray) and value.size and getattr(fresh, name).shape == value.shape:
            arrays[name] = value
    return arrays


def _mujoco_state(env: Any) -> dict[str, Any]:
    """One env's part of Note [env state]."""
    physics = np.empty(mujoco.mj_stateSize(env.model, _INTEGRATION))
    mujoco.mj_getState(env.model, env.data, physics, _INTEGRATION)
    arrays = {name: torch.from_numpy(a.copy()) for name, a in _fixed_arrays(env.data, env.model).items()}
    rng = env.np_random.bit_generator.state
    return {"physics": torch.from_numpy(physics), "arrays": arrays, "np_random": rng}


def _restore_mujoco_state(env: Any, saved: dict[str, Any]) -> None:
    mujoco.mj_setState(env.model, env.data, saved["physics"].numpy(), _INTEGRATION)
    arrays = _fixed_arrays(env.data, env.model)
    for name, value in saved["arrays"].items():
        if name in arrays:  # a field another MuJoCo version had is not needed by this one
            arrays[name][...] = value.numpy()
    env.np_random.bit_generator.state = saved["np_random"]


class MujocoBatchedEnv:
    """``num_envs`` copies of a gymnasium env, stepped together with auto-reset.

    Implements :class:`fastsac_core.env.BatchedEnv`. The critic observation is the actor
    observation (these tasks have no privileged part). Env ``i`` is reset with the i-th seed of
    :func:`env_seeds` on the first :meth:`reset`; later automatic resets continue each env's own
    random stream, so a batch is deterministic given its seed and its actions.

    Args:
        env_id: gymnasium id (``Humanoid-v5``).
        num_envs: Number of environments N (>= 1).
        seed: Seed of the env resets and of :meth:`sample_actions`.
        max_episode_steps: Time limit in steps; None keeps the env's registered limit (1000
            for the v5 tasks).
        env_kwargs: Keyword arguments of ``gymnasium.make`` for every env.
        keep_wrappers: Step the envs with their registered wrappers (the user's envs) instead of
            the unwrapped classes (the built-in tasks' fast path).
        batched_step: Step gymnasium's v5 locomotion envs in one batch (Note [native step]; kept
            wrappers too, when they are only gymnasium's time limit and checks); False steps each env
            through its own ``step`` (the same results, slower: for comparison).
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int,
        *,
        max_episode_steps: int | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        keep_wrappers: bool = False,
        batched_step: bool = True,
    ) -> None:
        if num_envs < 1:
            raise TaskError(f"num_envs={num_envs} for {env_id}; use at least 1 environment")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise TaskError(
                f"max_episode_steps={max_episode_steps} for {env_id}; use a positive limit or None "
                "for the env's own"
            )
        self._env_id = env_id
        self._seed = seed
        kwargs = dict(env_kwargs or {})
        if keep_wrappers and max_episode_steps is not None:
            kwargs["max_episode_steps"] = max_episode_steps  # the registered TimeLimit takes it
        try:
            with quiet_mujoco_compiler():
                wrapped = [gym.make(env_id, disable_env_checker=True, **kwargs) for _ in range(num_envs)]
        except Exception as error:  # gymnasium and the env's own code raise many types: one line
            raise _make_failed(env_id, env_kwargs or {}, error) from error
        obs_space, act_space = check_spaces(env_id, wrapped[0].observation_space, wrapped[0].action_space)
        spec_limit = wrapped[0].spec.max_episode_steps if wrapped[0].spec is not None else None
        limit = max_episode_steps if max_episode_steps is not None else spec_limit
        if limit is None:
            for env in wrapped:
                env.close()
            raise TaskError(
                f"{env_id} registers no time limit and task.max_episode_steps is not set: an episode "
                "that never ends would hold the evaluation and the episode statistics forever; give "
                "task.max_episode_steps=<the longest episode, in steps>"
            )
        self._max_episode_steps = int(limit)
        # Kept wrappers report their own truncation (TimeLimit): no count of ours cuts episodes then.
        self._own_limit = np.iinfo(np.int64).max if keep_wrappers else self._max_episode_steps
        self._keep_wrappers = keep_wrappers
        self._envs: list[Any] = wrapped if keep_wrappers else [env.unwrapped for env in wrapped]
        self._native = self._native_step() if batched_step else None

        obs_dim = int(obs_space.shape[0])
        act_dim = int(act_space.shape[0])
        self._low = np.asarray(act_space.low, dtype=np.float32)
        self._high = np.asarray(act_space.high, dtype=np.float32)
        self._dims = EnvDims(
            obs_dim=obs_dim,
            critic_obs_dim=obs_dim,
            act_dim=act_dim,
            action_low=tuple(float(x) for x in self._low),
            action_high=tuple(float(x) for x in self._high),
            critic_obs_is_obs=True,  # gymnasium tasks have no privileged observation
        )

        n = num_envs
        # Note [obs double buffering]: two obs arrays, alternated by ``_parity``.
        self._obs = (np.zeros((n, obs_dim), np.float32), np.zeros((n, obs_dim), np.float32))
        self._parity = 0
        self._final_obs = np.zeros((n, obs_dim), np.float32)
        self._rewards = np.zeros(n, np.float32)
        self._terminated = np.zeros(n, np.bool_)
        self._env_truncated = np.zeros(n, np.bool_)
        self._action_shape = (n, act_dim)
        self._ep_return = np.zeros(n, np.float64)
        self._ep_length = np.zeros(n, np.int64)
        self._rng = _action_rng(seed)
        self._pending_seeds: list[int] | None = env_seeds(seed, n)
        self._has_reset = False
        self._closed = False

    def _native_step(self) -> NativeStep | None:
        """Note [native step] for these envs, or None; the batch then counts a kept TimeLimit's limit."""
        inner, limits = [], set()
        for env in self._envs:
            plain = plain_env(env)  # kept wrappers: only gymnasium's time limit and checks, or None
            if plain is None:
                return None
            inner.append(plain[0])
            limits.add(plain[1])
        native = native_step(inner)
        if native is not None and self._keep_wrappers:  # the TimeLimit no longer counts steps: the batch does
            (limit,) = limits  # the envs are made alike
            self._own_limit = np.iinfo(np.int64).max if limit is None else int(limit)
        return native

    @property
    def num_envs(self) -> int:
        """Number of environments N."""
        return len(self._envs)

    @property
    def dims(self) -> EnvDims:
        """Dimensions and action bounds."""
        return self._dims

    @property
    def env_id(self) -> str:
        """The gymnasium id of the envs."""
        return self._env_id

    @property
    def max_episode_steps(self) -> int:
        """Time limit in steps after which an episode is truncated."""
        return self._max_episode_steps

    def reset(self, seed: int | None = None) -> tuple[F32, F32]:
        """Reset every env; returns (obs, critic_obs), the same array twice.

        Args:
            seed: Re-seed the envs and the random actions from this base seed; None uses the
                constructor's seed on the first reset and continues each env's stream after.
        """
        if seed is not None:
            self._pending_seeds = env_seeds(seed, self.num_envs)
            self._rng = _action_rng(seed)
        seeds = self._pending_seeds
        self._pending_seeds = None
        self._parity ^= 1
        obs = self._obs[self._parity]
        for i, env in enumerate(self._envs):
            o, _ = env.reset(seed=None if seeds is None else seeds[i])
            obs[i] = self._checked_obs(o, "reset")
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        self._has_reset = True
        return obs, obs

    def step(self, actions: F32) -> StepResult:
        """Step every env once; ended envs are reset and their last obs goes to ``final_obs``.

        Args:
            actions: (N, act_dim) actions; values outside the bounds are clipped.

        Returns:
            The step's :class:`StepResult` (obs: see Note [obs double buffering]).

        Raises:
            EnvProtocolError: A step before ``reset``, or actions of another shape (one line).
        """
        if not self._has_reset:
            raise EnvProtocolError(f"step() on {self._env_id} before reset(); call reset() once first")
        if actions.shape != self._action_shape:
            raise EnvProtocolError(
                f"actions of shape {actions.shape} for {self.num_envs} envs of {self._env_id}; "
                f"pass an array of shape {self._action_shape}"
            )
        # A new array every step, never a reused buffer: an env may keep the action it was given (an
        # action-rate penalty keeps the previous one), and its row must not change under it.
        clipped = np.clip(actions, self._low, self._high).astype(np.float32, copy=False)
        self._parity ^= 1
        obs = self._obs[self._parity]
        rewards = self._rewards
        terminated = self._terminated
        env_truncated = self._env_truncated
        if self._native is not None:
            # The env itself never truncates: a time limit, a kept TimeLimit's too, is the batch's count.
            self._native(clipped, obs, rewards, terminated)
        else:
            for i, env in enumerate(self._envs):
                o, r, term, trunc, _ = env.step(clipped[i])
                obs[i] = self._checked_obs(o, "step")
                rewards[i] = r
                terminated[i] = term
                env_truncated[i] = trunc

        self._ep_return += rewards
        self._ep_length += 1
        truncated = (env_truncated | (self._ep_length >= self._own_limit)) & ~terminated
        done = terminated | truncated
        ended = np.flatnonzero(done)
        episode_returns = self._ep_return[ended].astype(np.float32)
        episode_lengths = self._ep_length[ended].copy()
        if ended.size:
            self._final_obs[ended] = obs[ended]
            for j in ended.tolist():
                o, _ = self._envs[j].reset()
                obs[j] = self._checked_obs(o, "reset")
            self._ep_return[ended] = 0.0
            self._ep_length[ended] = 0
        return StepResult(
            obs=obs,
            critic_obs=obs,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            final_obs=self._final_obs,
            episode_returns=episode_returns,
            episode_lengths=episode_lengths,
        )

    def _checked_obs(self, obs: Any, call: str) -> Any:
        """One env's observation once its shape is the space's (numpy would broadcast a (1,) into a row)."""
        shape = np.shape(obs)
        if shape != (self._dims.obs_dim,):
            raise EnvSpaceError(
                f"{self._env_id}'s {call}() returned an observation of shape {shape}; its observation "
                f"space says ({self._dims.obs_dim},): return observations of the declared shape"
            )
        return obs

    def save_state(self) -> dict[str, Any] | None:
        """The batch's state (Note [env state]); None for envs kept with their wrappers or not MuJoCo's."""
        mujoco_envs = all(hasattr(env, "model") and hasattr(env, "data") for env in self._envs)
        if self._keep_wrappers or not mujoco_envs or not self._has_reset:
            return None
        return {
            "env_id": self._env_id,
            "envs": [_mujoco_state(env) for env in self._envs],
            "action_rng": self._rng.bit_generator.state,
            "ep_return": torch.from_numpy(self._ep_return.copy()),
            "ep_length": torch.from_numpy(self._ep_length.copy()),
            "obs": torch.from_numpy(self._obs[self._parity].copy()),
        }

    def restore_state(self, state: dict[str, Any]) -> tuple[F32, F32]:
        """Continue from :meth:`save_state` of a batch of the same task and size; returns (obs, obs).

        Raises:
            EnvProtocolError: The state is of another task or batch size.
        """
        if state["env_id"] != self._env_id or len(state["envs"]) != self.num_envs:
            raise EnvProtocolError(
                f"the saved env state is of {len(state['envs'])} x {state['env_id']}, not {self.num_envs} x "
                f"{self._env_id}; resume with the task and task.num_envs it was saved with"
            )
        for env, saved in zip(self._envs, state["envs"], strict=True):
            _restore_mujoco_state(env, saved)
        self._rng.bit_generator.state = state["action_rng"]
        self._ep_return[:] = state["ep_return"].numpy()
        self._ep_length[:] = state["ep_length"].numpy()
        self._pending_seeds = None
        self._parity ^= 1
        obs = self._obs[self._parity]
        obs[:] = state["obs"].numpy()
        self._has_reset = True
        return obs, obs

    def sample_actions(self) -> F32:
        """(N, act_dim) uniform random actions within the bounds, drawn in one numpy call."""
        u = self._rng.random(self._action_shape, dtype=np.float32)
        return self._low + (self._high - self._low) * u

    def close(self) -> None:
        """Close every env (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for env in self._envs:
            env.close()
        _log.debug("closed %d x %s", len(self._envs), self._env_id)

    def __enter__(self) -> MujocoBatchedEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
