"""Errors of the task layer; each names the setting, the value seen and the fix."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fastsac_core import EnvOutputError

__all__ = ["EnvSpaceError", "TaskError", "UnknownTaskError", "kwargs_fault"]


class TaskError(ValueError):
    """A task or environment setting is invalid."""


class EnvSpaceError(TaskError, EnvOutputError):
    """A gymnasium env returned what its space does not declare (an observation of another shape).

    An ``EnvOutputError`` too: one line already, which a collector passes as it is rather than as an
    exception of the env's own code (``fastsac_core.EnvCall``).
    """


class UnknownTaskError(TaskError, KeyError):
    """``task=<name>`` names no registered task."""

    def __str__(self) -> str:
        # KeyError would quote the message; show it as written.
        return str(self.args[0]) if self.args else ""


_UNEXPECTED_KEYWORD = re.compile(r"unexpected keyword argument '(\w+)'")


def kwargs_fault(maker: str, env_kwargs: Mapping[str, Any], error: BaseException) -> TaskError | None:
    """``error``, raised by calling ``maker`` with ``task.env_kwargs``, as their fault; None if it is not.

    A ``TypeError`` while keyword arguments were given is theirs, unless it names a keyword that is
    not one of them (the env's own bug).
    """
    if not isinstance(error, TypeError) or not env_kwargs:
        return None
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    unknown = _UNEXPECTED_KEYWORD.search(first)
    if unknown is not None and unknown.group(1) not in env_kwargs:
        return None
    what = (
        f"{maker} takes no keyword argument {unknown.group(1)!r}"
        if unknown
        else f"{maker} refused them ({first})"
    )
    return TaskError(
        f"task.env_kwargs={dict(env_kwargs)!r} is invalid: {what}; pass only keyword arguments it takes"
    )
