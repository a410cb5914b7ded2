"""What a batched env hands back, checked before it reaches a ring, a replay buffer or a policy.

An env that returns arrays of the wrong shape, flags that are not booleans, or a NaN or an infinity
would otherwise fail far from its cause (a ring's layout error in transport terms; a learner's
"index out of bounds" from a NaN reward inside the distributional projection) or, where numpy can
broadcast, train on wrong data without a word. Both trainers call these after every ``reset`` and
``step`` (a few microseconds against a step's milliseconds); the error names the env, the array, what
was seen and what the protocol (``fastsac_core.env``) asks.
"""

from __future__ import annotations

import numpy as np

from .env import BatchedEnv, StepResult
from .exceptions import EnvOutputError

__all__ = ["check_reset", "check_step", "env_label"]


def env_label(env: BatchedEnv) -> str:
    """The env as an error names it: its gymnasium id (``env_id``) where it has one, else its type."""
    env_id = getattr(env, "env_id", None)
    return env_id if isinstance(env_id, str) and env_id else type(env).__name__


def _check_shape(env: BatchedEnv, call: str, name: str, value: object, shape: tuple[int, ...]) -> None:
    if not isinstance(value, np.ndarray):
        raise EnvOutputError(
            f"{env_label(env)}'s {call}() returned {name} as a {type(value).__name__}; "
            f"return a numpy array of shape {shape} (fastsac_core.env.BatchedEnv)"
        )
    if value.shape != shape:
        raise EnvOutputError(
            f"{env_label(env)}'s {call}() returned {name} of shape {value.shape}; it must be {shape} "
            f"({shape[0]} envs; sizes from its dims, fastsac_core.env.BatchedEnv)"
        )


def _check_finite(
    env: BatchedEnv, call: str, name: str, value: np.ndarray, rows: np.ndarray | None = None
) -> None:
    """Raise unless ``value`` is finite; ``rows``: the env rows ``value`` holds (default: all, in order)."""
    if value.size and not np.isfinite(value).all():
        bad = np.argwhere(~np.isfinite(value))[0]
        row = int(bad[0]) if rows is None else int(rows[bad[0]])
        raise EnvOutputError(
            f"{env_label(env)}'s {call}() returned {name} holding {value[tuple(bad)]} (env {row} of "
            f"{env.num_envs}); an env must return finite observations and rewards: look for an "
            "unstable simulation or a division by zero in the env"
        )


def _check_obs(env: BatchedEnv, call: str, obs: object, critic_obs: object) -> None:
    n, dims = env.num_envs, env.dims
    _check_shape(env, call, "observations", obs, (n, dims.obs_dim))
    _check_shape(env, call, "critic observations", critic_obs, (n, dims.critic_obs_dim))
    assert isinstance(obs, np.ndarray) and isinstance(critic_obs, np.ndarray)
    _check_finite(env, call, "observations", obs)
    if critic_obs is not obs:
        _check_finite(env, call, "critic observations", critic_obs)


def check_reset(env: BatchedEnv, obs: object, critic_obs: object) -> None:
    """Raise unless ``reset``'s (or ``restore_state``'s) arrays fit ``env``: shapes and finite values.

    Raises:
        EnvOutputError: What is wrong, naming the env and the array.
    """
    _check_obs(env, "reset", obs, critic_obs)


def check_step(env: BatchedEnv, result: StepResult) -> None:
    """Raise unless ``step``'s result fits ``env``: shapes, boolean flags, finite values.

    Raises:
        EnvOutputError: What is wrong, naming the env and the array.
    """
    n = env.num_envs
    _check_obs(env, "step", result.obs, result.critic_obs)
    _check_shape(env, "step", "rewards", result.rewards, (n,))
    _check_finite(env, "step", "rewards", result.rewards)
    for name in ("terminated", "truncated"):
        flags = getattr(result, name)
        _check_shape(env, "step", name, flags, (n,))
        integers = np.issubdtype(flags.dtype, np.integer)
        if flags.dtype != np.bool_ and not (integers and bool(((flags == 0) | (flags == 1)).all())):
            what = "holding values other than 0 and 1" if integers else f"of dtype {flags.dtype}"
            raise EnvOutputError(
                f"{env_label(env)}'s step() returned {name} {what}; return booleans (a numpy bool "
                f"array of shape ({n},))"
            )
    _check_shape(env, "step", "final_obs", result.final_obs, (n, env.dims.obs_dim))
    ended = np.flatnonzero(np.logical_or(result.terminated, result.truncated))
    if ended.size:
        _check_finite(
            env, "step", "final_obs of the episodes that ended", result.final_obs[ended], rows=ended
        )
