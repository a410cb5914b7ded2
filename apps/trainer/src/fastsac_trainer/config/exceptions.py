"""Errors of the trainer app that a user can fix: each names the setting, the value seen and the fix."""

from __future__ import annotations

__all__ = ["ConfigError", "EnvError", "TrainerAppError"]


class TrainerAppError(Exception):
    """A mistake the user can fix; the CLI prints its message as one line and exits non-zero."""


class ConfigError(TrainerAppError, ValueError):
    """An invalid configuration value.

    Args:
        setting: Key path of the setting (``algo.trainer.async_options.ring_capacity``).
        value: The value seen.
        fix: What to do instead.
    """

    def __init__(self, setting: str, value: object, fix: str) -> None:
        self.setting = setting
        self.value = value
        self.fix = fix
        super().__init__(f"{setting}={value!r} is invalid: {fix}")


class EnvError(TrainerAppError):
    """The env raised while a synchronous run stepped it: the run stopped, and the message says where."""
