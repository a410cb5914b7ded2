"""Errors of the task layer; each names the setting, the value seen and the fix."""

from __future__ import annotations

__all__ = ["TaskError", "UnknownTaskError"]


class TaskError(ValueError):
    """A task or environment setting is invalid."""


class UnknownTaskError(TaskError, KeyError):
    """``task=<name>`` names no registered task."""

    def __str__(self) -> str:
        # KeyError would quote the message; show it as written.
        return str(self.args[0]) if self.args else ""
