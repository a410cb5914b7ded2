"""The batched environment protocol that both trainers step.

It lives here (typing only, no simulator imports) so that the asynchronous engine and the
app's synchronous trainer depend on the same contract; the MuJoCo implementation lives in
``apps/trainer`` (``fastsac_trainer.tasks``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from .exceptions import ConfigError

__all__ = ["F32", "BatchedEnv", "EnvDims", "EnvFactory", "ResumableEnv", "StepResult"]

F32 = npt.NDArray[np.float32]
"""A float32 numpy array: the observations, rewards and actions the protocol passes."""
Bool = npt.NDArray[np.bool_]


@dataclass(frozen=True, kw_only=True)
class EnvDims:
    """Dimensions and action bounds of a task (what a learner needs before any env exists)."""

    obs_dim: int
    """Length of the actor observation."""
    critic_obs_dim: int
    """Length of the critic observation (equal to obs_dim when the task has no privileged part)."""
    act_dim: int
    """Length of the action."""
    action_low: tuple[float, ...]
    """Per-dimension lower action bound."""
    action_high: tuple[float, ...]
    """Per-dimension upper action bound."""
    critic_obs_is_obs: bool = False
    """The critic observes exactly the actor's observation (a task without a privileged part, like
    every gymnasium task): rings and replay buffers then carry and store it once, and one normalizer
    serves both. Requires ``critic_obs_dim == obs_dim``."""

    def __post_init__(self) -> None:
        if self.critic_obs_is_obs and self.critic_obs_dim != self.obs_dim:
            raise ConfigError(
                f"critic_obs_is_obs=True needs critic_obs_dim == obs_dim, got {self.critic_obs_dim} and "
                f"{self.obs_dim}; set critic_obs_is_obs=False for a critic observation of its own"
            )

    @property
    def stored_critic_obs_dim(self) -> int | None:
        """Width of the critic observation as rings and replay buffers store it; None when shared."""
        return None if self.critic_obs_is_obs else self.critic_obs_dim


@dataclass(frozen=True, kw_only=True)
class StepResult:
    """What one batched step returns. Arrays are owned by the caller until the next step."""

    obs: F32
    """(N, obs_dim) observation after the step; for an env that just ended, the reset obs."""
    critic_obs: F32
    """(N, critic_obs_dim), same convention as obs."""
    rewards: F32
    """(N,) rewards of this step."""
    terminated: Bool
    """(N,) true where the episode ended in a terminal state (no bootstrap)."""
    truncated: Bool
    """(N,) true where the episode was cut by a time limit (and not terminated)."""
    final_obs: F32
    """(N, obs_dim) the true last obs of episodes that ended this step (rows of others are stale)."""
    episode_returns: F32
    """(k,) undiscounted returns of the k episodes that ended this step."""
    episode_lengths: npt.NDArray[np.int64]
    """(k,) lengths of the k episodes that ended this step."""


class BatchedEnv(Protocol):
    """N environments stepped together with auto-reset."""

    @property
    def num_envs(self) -> int:
        """Number of environments N."""
        ...

    @property
    def dims(self) -> EnvDims:
        """Dimensions and action bounds."""
        ...

    def reset(self, seed: int | None = None) -> tuple[F32, F32]:
        """Reset every env; returns (obs, critic_obs)."""
        ...

    def step(self, actions: F32) -> StepResult:
        """Step every env with (N, act_dim) actions within the bounds; ended envs auto-reset."""
        ...

    def sample_actions(self) -> F32:
        """(N, act_dim) uniform random actions within the bounds, drawn in one batch."""
        ...

    def close(self) -> None:
        """Release the simulator."""
        ...


@runtime_checkable
class ResumableEnv(BatchedEnv, Protocol):
    """A :class:`BatchedEnv` that can save where its episodes are and continue them in a new process.

    Optional: the synchronous trainer saves the state with its replay buffer, and a resume of it
    continues every episode exactly where it stopped (a bit-identical resume); envs without it (and
    the collectors' envs) restart their episodes on a resume.
    """

    def save_state(self) -> dict[str, Any] | None:
        """Everything the next steps depend on (tensors and plain values); None when it cannot."""
        ...

    def restore_state(self, state: dict[str, Any]) -> tuple[F32, F32]:
        """Continue from :meth:`save_state` of an env built alike; returns (obs, critic_obs) as ``reset``."""
        ...


EnvFactory = Callable[[int, int], BatchedEnv]
"""A picklable callable ``(num_envs, seed) -> BatchedEnv`` (collectors build their shard with it)."""
