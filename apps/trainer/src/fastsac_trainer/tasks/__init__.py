"""Tasks: gymnasium MuJoCo environments and the user's own, behind the batched-env protocol.

Each name loads its module on first use (``__getattr__``): the registry alone (``trainer --help``)
comes without gymnasium, MuJoCo or torch.
"""

from typing import TYPE_CHECKING

from fastsac_trainer._lazy import home_of, lazy_exports

if TYPE_CHECKING:
    from fastsac_trainer.tasks._factory import MujocoEnvFactory, import_env_module, probe_dims
    from fastsac_trainer.tasks._mujoco_env import MujocoBatchedEnv, check_spaces, env_seeds
    from fastsac_trainer.tasks._quiet import quiet_mujoco_compiler
    from fastsac_trainer.tasks._registry import DEFAULT_TASK, GYM_TASK, TASKS, TaskSpec, get_task, task_names
    from fastsac_trainer.tasks._select import env_factory_for
    from fastsac_trainer.tasks._user_env import UserEnvFactory, check_batched_env, load_target, target_of
    from fastsac_trainer.tasks.exceptions import TaskError, UnknownTaskError

__all__ = [  # noqa: RUF022 - grouped by topic, sorted within each group
    # Registry
    "DEFAULT_TASK",
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

_HOMES = {  # the module that defines each exported name
    "fastsac_trainer.tasks._factory": ("MujocoEnvFactory", "import_env_module", "probe_dims"),
    "fastsac_trainer.tasks._mujoco_env": ("MujocoBatchedEnv", "check_spaces", "env_seeds"),
    "fastsac_trainer.tasks._quiet": ("quiet_mujoco_compiler",),
    "fastsac_trainer.tasks._registry": (
        "DEFAULT_TASK",
        "GYM_TASK",
        "TASKS",
        "TaskSpec",
        "get_task",
        "task_names",
    ),
    "fastsac_trainer.tasks._select": ("env_factory_for",),
    "fastsac_trainer.tasks._user_env": ("UserEnvFactory", "check_batched_env", "load_target", "target_of"),
    "fastsac_trainer.tasks.exceptions": ("TaskError", "UnknownTaskError"),
}
_HOME_OF = home_of(_HOMES)
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
