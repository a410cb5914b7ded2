"""Errors of the task layer; each names the setting, the value seen and the fix."""

from __future__ import annotations

import re
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["TaskError", "UnknownTaskError", "env_fault", "kwargs_fault"]


class TaskError(ValueError):
    """A task or environment setting is invalid."""


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


def env_fault(error: BaseException) -> str:
    """An exception an env's own code raised, as one line: its type, its first line and where it was raised.

    E.g. ``ValueError: bad action (raised at myenvs.py:49 in step)``: the user's file and line, which a
    one-line error would otherwise lose with the traceback.
    """
    first = str(error).splitlines()[0] if str(error) else ""
    frames = traceback.extract_tb(error.__traceback__)
    where = (
        f" (raised at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})"
        if frames
        else ""
    )
    return f"{type(error).__name__}: {first}{where}"
