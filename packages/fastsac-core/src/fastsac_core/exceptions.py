"""Errors raised by fastsac-core.

Each message names the setting or object at fault, the value seen, and what to do about it.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ConfigError",
    "EnvCallError",
    "EnvOutputError",
    "FastSACCoreError",
    "ReplayBufferError",
]


class FastSACCoreError(Exception):
    """Base class of every error fastsac-core raises on purpose."""


class ConfigError(FastSACCoreError, ValueError):
    """A hyper-parameter or constructor argument is out of range or inconsistent with another.

    Attributes:
        setting: The :class:`~fastsac_core.FastSACConfig` field at fault (None for other arguments).
        value: The value seen.
        fix: What to do instead (the part of the message after "is invalid: ").
    """

    def __init__(
        self, message: str, *, setting: str | None = None, value: object = None, fix: str = ""
    ) -> None:
        super().__init__(message)
        self.setting = setting
        self.value = value
        self.fix = fix

    @classmethod
    def of_setting(cls, setting: str, value: object, fix: str) -> ConfigError:
        """The error of a ``FastSACConfig`` field: ``agent.<setting>=<value> is invalid: <fix>``.

        Args:
            setting: The field.
            value: The value seen.
            fix: What to do instead.
        """
        return cls(f"agent.{setting}={value!r} is invalid: {fix}", setting=setting, value=value, fix=fix)


class ReplayBufferError(FastSACCoreError, ValueError):
    """Data handed to the replay buffer has the wrong shape, or a sample was asked of too little data."""


class CheckpointError(FastSACCoreError):
    """A checkpoint is missing, unreadable, or does not match the agent it is loaded into."""


class EnvOutputError(FastSACCoreError, ValueError):
    """A batched env returned arrays that break its protocol: a shape, a flag's dtype, a NaN, an infinity.

    An env adapter's own refusal of what breaks the protocol (a gymnasium env's observation of another
    shape than its space's, a ``step`` before ``reset``) is one too: already one line, which
    :class:`~fastsac_core.EnvCall` passes as it is rather than as an exception of the env's code.
    """


class EnvCallError(FastSACCoreError):
    """An env's own ``reset`` or ``step`` raised; raised ``from`` that exception (the traceback keeps it).

    Its message is one line (:func:`~fastsac_core.env_raised`): ``Pendulum-v1's step() raised
    ValueError: bad action (raised at myenv.py:49 in step)``.
    """
