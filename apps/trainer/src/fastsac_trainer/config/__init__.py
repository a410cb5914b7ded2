"""The trainer's configuration: hydra structured configs and their conversion to library configs.

Each name loads its module on first use (``__getattr__``): the app's error classes
(``fastsac_trainer.config.exceptions``) come without hydra or the libraries.
"""

from typing import TYPE_CHECKING

from fastsac_trainer._lazy import home_of, lazy_exports

if TYPE_CHECKING:
    from fastsac_trainer.config.compose import compose_config, condense_error, explicit_keys
    from fastsac_trainer.config.exceptions import ConfigError, TrainerAppError
    from fastsac_trainer.config.placement import actor_param_bytes, describe_placement
    from fastsac_trainer.config.resolve import (
        CPU_PROFILE,
        ResolvedRun,
        apply_cpu_profile,
        resolve_device,
        resolve_run,
    )
    from fastsac_trainer.config.schema import AlgoConfig, RootConfig, TaskConfig, TrainerConfig
    from fastsac_trainer.config.store import DEFAULT_TASK, PRIMARY_CONFIG, register_configs, task_node
    from fastsac_trainer.config.validate import check_device, normalize_switch, validate_config

__all__ = [  # noqa: RUF022 - grouped by topic, sorted within each group
    # Schema
    "AlgoConfig",
    "RootConfig",
    "TaskConfig",
    "TrainerConfig",
    # Hydra
    "DEFAULT_TASK",
    "PRIMARY_CONFIG",
    "compose_config",
    "condense_error",
    "explicit_keys",
    "register_configs",
    "task_node",
    # Validation and resolution
    "CPU_PROFILE",
    "ResolvedRun",
    "apply_cpu_profile",
    "check_device",
    "normalize_switch",
    "resolve_device",
    "resolve_run",
    "validate_config",
    # Placement
    "actor_param_bytes",
    "describe_placement",
    # Errors
    "ConfigError",
    "TrainerAppError",
]

_HOMES = {  # the module that defines each exported name
    "fastsac_trainer.config.compose": ("compose_config", "condense_error", "explicit_keys"),
    "fastsac_trainer.config.exceptions": ("ConfigError", "TrainerAppError"),
    "fastsac_trainer.config.placement": ("actor_param_bytes", "describe_placement"),
    "fastsac_trainer.config.resolve": (
        "CPU_PROFILE",
        "ResolvedRun",
        "apply_cpu_profile",
        "resolve_device",
        "resolve_run",
    ),
    "fastsac_trainer.config.schema": ("AlgoConfig", "RootConfig", "TaskConfig", "TrainerConfig"),
    "fastsac_trainer.config.store": ("DEFAULT_TASK", "PRIMARY_CONFIG", "register_configs", "task_node"),
    "fastsac_trainer.config.validate": ("check_device", "normalize_switch", "validate_config"),
}
_HOME_OF = home_of(_HOMES)
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
