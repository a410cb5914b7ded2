"""The trainer's configuration: hydra structured configs and their conversion to library configs."""

from trainer.config.schema import AlgoConfig, RootConfig, TaskConfig, TrainerConfig

__all__ = ["AlgoConfig", "RootConfig", "TaskConfig", "TrainerConfig"]
