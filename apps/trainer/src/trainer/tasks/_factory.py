"""A picklable env factory (what collectors receive) and the one-env dimension probe."""

from __future__ import annotations

from dataclasses import dataclass

from fastsac_core.env import EnvDims, EnvFactory
from trainer.tasks._mujoco_env import MujocoBatchedEnv

__all__ = ["MujocoEnvFactory", "probe_dims"]


@dataclass(frozen=True, kw_only=True)
class MujocoEnvFactory:
    """Builds a :class:`MujocoBatchedEnv` shard: ``factory(num_envs, seed)``.

    A frozen dataclass of plain fields, so it pickles into spawned collector processes.
    """

    env_id: str
    """gymnasium id (``Humanoid-v5``)."""
    max_episode_steps: int | None = None
    """Time limit in steps; None keeps the env's own."""

    def __call__(self, num_envs: int, seed: int) -> MujocoBatchedEnv:
        """Build ``num_envs`` envs seeded from ``seed``."""
        return MujocoBatchedEnv(self.env_id, num_envs, seed, max_episode_steps=self.max_episode_steps)


def probe_dims(factory: EnvFactory) -> EnvDims:
    """Dimensions and action bounds of a task, read from a one-env batch that is closed after."""
    env = factory(1, 0)
    try:
        return env.dims
    finally:
        env.close()
