"""Picklable env factories (what collectors receive) and the one-env dimension probe."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from fastsac_core import (
    EnvCall,
    EnvCallError,
    EnvDims,
    EnvFactory,
    EnvOutputError,
    check_reset,
    check_step,
)
from fastsac_trainer.tasks._mujoco_env import MujocoBatchedEnv
from fastsac_trainer.tasks.exceptions import TaskError

__all__ = ["MujocoEnvFactory", "import_env_module", "import_user_module", "probe_dims"]


def import_user_module(module: str, setting: str) -> ModuleType:
    """Import a user's ``module`` that ``setting`` names (its value as given).

    Raises:
        TaskError: Any import-time failure, as one line: the setting, the error, the fix.
    """
    try:
        return importlib.import_module(module)
    except Exception as error:  # any import-time failure of the user's module is one line.
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
        if missing is not None and (module == missing or module.startswith(f"{missing}.")):
            raise TaskError(
                f"{setting} is invalid: {first}; put the module's folder on PYTHONPATH "
                "(or install its package) so every process can import it"
            ) from None
        raise TaskError(  # found, but its own code failed (or something it imports is missing)
            f"{setting} is invalid: importing {module} raised {type(error).__name__}: {first}; fix the module"
        ) from None


def import_env_module(module: str | None) -> None:
    """Import ``task.env_import`` (a module whose import registers the user's envs); None: nothing.

    Raises:
        TaskError: The module cannot be imported (one line: its name, the error, the fix).
    """
    if module is not None:
        import_user_module(module, f"task.env_import={module!r}")


@dataclass(frozen=True, kw_only=True)
class MujocoEnvFactory:
    """Builds a :class:`MujocoBatchedEnv` shard: ``factory(num_envs, seed)``.

    A frozen dataclass of plain fields, so it pickles into spawned collector processes; it imports
    ``env_import`` in the process that calls it, before ``gymnasium.make``, so a registration done
    by that module happens in every collector.
    """

    env_id: str
    """gymnasium id (``Humanoid-v5``)."""
    max_episode_steps: int | None = None
    """Time limit in steps; None keeps the env's own."""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``gymnasium.make``."""
    env_import: str | None = None
    """Module imported before ``gymnasium.make`` (it registers the env); None: none."""
    keep_wrappers: bool = False
    """Step the env with its registered wrappers (a user's env) instead of unwrapped (the built-ins)."""
    video_camera: str | None = None
    """Camera of its videos, by name in the env's MuJoCo model (``fastsac_trainer.video``); None:
    gymnasium's default view. Collectors never render: only videos read it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "env_kwargs", dict(self.env_kwargs))  # a copy of plain containers

    def __call__(self, num_envs: int, seed: int) -> MujocoBatchedEnv:
        """Build ``num_envs`` envs seeded from ``seed``."""
        import_env_module(self.env_import)
        return MujocoBatchedEnv(
            self.env_id,
            num_envs,
            seed,
            max_episode_steps=self.max_episode_steps,
            env_kwargs=self.env_kwargs,
            keep_wrappers=self.keep_wrappers,
        )

    @property
    def label(self) -> str:
        """What the envs are, for a console line (the gymnasium id)."""
        return self.env_id


def probe_dims(factory: EnvFactory) -> EnvDims:
    """Dimensions and action bounds of a task, read from a one-env batch that is closed after.

    The batch is also reset and stepped once with random actions, its arrays checked
    (``fastsac_core.check_reset``, ``check_step``): an env that returns the wrong shapes, flags that
    are not booleans or non-finite numbers on its first step is refused here, in one line, before
    any process starts. Its calls go through ``fastsac_core.EnvCall``, as a trainer's do: what is the
    env's own exception is decided there, once.

    Raises:
        TaskError: Its reset or step raised, or returned what the protocol does not allow.
    """
    env = factory(1, 0)
    try:
        try:
            with EnvCall(env, "reset"):
                obs, critic_obs = env.reset()
            check_reset(env, obs, critic_obs)
            with EnvCall(env, "sample_actions"):
                actions = env.sample_actions()
            with EnvCall(env, "step"):
                result = env.step(actions)
            check_step(env, result)
        except TaskError:  # the gymnasium adapter's refusal (an EnvOutputError): names the env already
            raise
        except EnvOutputError as error:
            raise TaskError(f"the task's env is invalid: {error}") from None
        except EnvCallError as error:  # the env's own code raised: its line, where it was raised
            raise TaskError(
                f"the task's env failed its first reset and step: {error}; fix the env"
            ) from error
        return env.dims
    finally:
        env.close()
