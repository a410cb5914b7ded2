"""Errors of the task layer; each names the setting, the value seen and the fix."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fastsac_core import EnvOutputError

__all__ = ["EnvProtocolError", "EnvSpaceError", "TaskError", "UnknownTaskError", "kwargs_fault"]


class TaskError(ValueError):
    """A task or environment setting is invalid."""


class EnvProtocolError(TaskError, EnvOutputError):
    """The gymnasium adapter refused a call that breaks the batched env protocol.

    ``step()`` before ``reset()``, actions of another shape than ``(num_envs, act_dim)``, a saved state
    of another task or batch size. An ``EnvOutputError`` too: one line already, which every trainer and
    the probe pass as they are rather than as an exception of the env's own code
    (``fastsac_core.EnvCall``, the one rule of which exceptions are the env's).
    """


class EnvSpaceError(EnvProtocolError):
    """A gymnasium env returned what its space does not declare (an observation of another shape)."""


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
