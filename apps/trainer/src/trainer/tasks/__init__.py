"""Tasks: gymnasium MuJoCo environments behind the batched-env protocol, and their settings."""

from trainer.tasks._factory import MujocoEnvFactory, probe_dims
from trainer.tasks._mujoco_env import MujocoBatchedEnv, env_seeds
from trainer.tasks._quiet import quiet_mujoco_compiler
from trainer.tasks._registry import TASKS, TaskSpec, get_task, task_names
from trainer.tasks.exceptions import TaskError, UnknownTaskError

__all__ = [  # noqa: RUF022 - grouped by topic, sorted within each group
    # Registry
    "TASKS",
    "TaskSpec",
    "get_task",
    "task_names",
    # Environments
    "MujocoBatchedEnv",
    "MujocoEnvFactory",
    "env_seeds",
    "probe_dims",
    "quiet_mujoco_compiler",
    # Errors
    "TaskError",
    "UnknownTaskError",
]
