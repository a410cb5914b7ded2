"""The trainer's configuration: hydra structured configs and their conversion to library configs."""

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
