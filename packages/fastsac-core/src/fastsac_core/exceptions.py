"""Errors raised by fastsac-core.

Each message names the setting or object at fault, the value seen, and what to do about it.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ConfigError",
    "FastSACCoreError",
    "ReplayBufferError",
]


class FastSACCoreError(Exception):
    """Base class of every error fastsac-core raises on purpose."""


class ConfigError(FastSACCoreError, ValueError):
    """A hyper-parameter or constructor argument is out of range or inconsistent with another."""


class ReplayBufferError(FastSACCoreError, ValueError):
    """Data handed to the replay buffer has the wrong shape, or a sample was asked of too little data."""


class CheckpointError(FastSACCoreError):
    """A checkpoint is missing, unreadable, or does not match the agent it is loaded into."""
