"""Tasks: gymnasium MuJoCo environments and the user's own, behind the batched-env protocol."""

from fastsac_trainer.tasks._factory import MujocoEnvFactory, import_env_module, probe_dims
from fastsac_trainer.tasks._mujoco_env import MujocoBatchedEnv, check_spaces, env_seeds
from fastsac_trainer.tasks._quiet import quiet_mujoco_compiler
from fastsac_trainer.tasks._registry import GYM_TASK, TASKS, TaskSpec, get_task, task_names
from fastsac_trainer.tasks._select import env_factory_for
from fastsac_trainer.tasks._user_env import UserEnvFactory, check_batched_env, load_target, target_of
from fastsac_trainer.tasks.exceptions import TaskError, UnknownTaskError

__all__ = [  # noqa: RUF022 - grouped by topic, sorted within each group
    # Registry
    "GYM_TASK",
    "TASKS",
    "TaskSpec",
    "get_task",
    "task_names",
    # Environments
    "MujocoBatchedEnv",
    "MujocoEnvFactory",
    "check_spaces",
    "env_factory_for",
    "env_seeds",
    "import_env_module",
    "probe_dims",
    "quiet_mujoco_compiler",
    # The user's own batched env
    "UserEnvFactory",
    "check_batched_env",
    "load_target",
    "target_of",
    # Errors
    "TaskError",
    "UnknownTaskError",
]
