"""What a batched env hands back, checked before it reaches a ring, a replay buffer or a policy.

An env that returns arrays of the wrong shape, flags that are not booleans, or a NaN or an infinity
would otherwise fail far from its cause (a ring's layout error in transport terms; a learner's
"index out of bounds" from a NaN reward inside the distributional projection) or, where numpy can
broadcast, train on wrong data without a word. Both trainers call these after every ``reset`` and
``step`` (a few microseconds against a step's milliseconds); the error names the env, the array, what
was seen and what the protocol (``fastsac_core.env``) asks.

An exception the env's own code raises is one line too, worded here once for every trainer
(:func:`env_raised`): the env, the call, the exception and the user's file and line it was raised at,
which a one-line error would otherwise lose with the traceback. :class:`EnvCall` raises it as an
:class:`~fastsac_core.EnvCallError` around the env calls of a collector, an evaluation, the
synchronous trainer and the app's probe of a task's env (``reset`` and ``step``; a resume's
``restore_state``, the probe's ``sample_actions``). It is also the one rule of which exceptions are
the env's: any ``Exception`` but a ``FastSACCoreError`` (ours, or an env adapter's ``EnvOutputError``,
already one line).
"""

from __future__ import annotations

import os
import sysconfig
import traceback
from pathlib import Path
from types import TracebackType

import numpy as np

from .env import BatchedEnv, StepResult
from .exceptions import EnvCallError, EnvOutputError, FastSACCoreError

__all__ = ["ADAPTER_MARK", "EnvCall", "check_reset", "check_step", "env_fault", "env_label", "env_raised"]

_MESSAGE_MAX = 160
"""Longest first line of an env's exception that :func:`env_fault` keeps (the place after it is kept)."""


def env_label(env: BatchedEnv) -> str:
    """The env as an error names it: its gymnasium id (``env_id``) where it has one, else its type."""
    env_id = getattr(env, "env_id", None)
    return env_id if isinstance(env_id, str) and env_id else type(env).__name__


def _library_dirs() -> tuple[str, ...]:
    """This interpreter's standard library and installed packages (as named and resolved), with a ``/``."""
    paths = sysconfig.get_paths()
    named = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(os.path.join(path, "") for path in named | {os.path.realpath(path) for path in named})


_LIBRARY_DIRS = _library_dirs()


def _in_library(filename: str) -> bool:
    """Whether a frame's file is the standard library's or an installed package's, not the user's."""
    parts = Path(filename).parts
    return (
        filename.startswith(_LIBRARY_DIRS)
        or "site-packages" in parts
        or "dist-packages" in parts
        or filename.startswith("<frozen ")
    )


ADAPTER_MARK = "__fastsac_env_adapter__"
"""A module that sets this global to True holds an env adapter, code between a trainer and an env (the
app's gymnasium batch): its frames are never where an env's exception is said to be raised."""


def _raised_at(error: BaseException) -> traceback.FrameSummary | None:
    """The frame an env's exception is said to be raised at: the env's code, not ours nor a library's.

    Of the frames below the first (which caught it: the trainer's line that called the env), leaving
    out an adapter's (:data:`ADAPTER_MARK`: the gymnasium batch's loop over its envs): the innermost
    outside the standard
    library and installed packages (a user env that calls ``np.reshape`` wrongly: its own line, not
    numpy's ``_wrapfunc``), else the innermost (an installed env: gymnasium's ``pendulum.py``); None
    where no frame is left (a native env's exception raised in C code).
    """
    theirs = [
        traceback.FrameSummary(frame.f_code.co_filename, lineno, frame.f_code.co_name, lookup_line=False)
        for frame, lineno in list(traceback.walk_tb(error.__traceback__))[1:]
        if frame.f_globals.get(ADAPTER_MARK) is not True
    ]
    user = [frame for frame in theirs if not _in_library(frame.filename)]
    return user[-1] if user else (theirs[-1] if theirs else None)


def env_fault(error: BaseException) -> str:
    """An exception an env's own code raised, as one line: its type, its first line and where it was raised.

    E.g. ``ValueError: bad action (raised at myenvs.py:49 in step)``: the user's file and line, which a
    one-line error would otherwise lose with the traceback (an exception without a message is its type
    alone). The place is the innermost frame of the user's code, not of a library it called
    (:func:`_raised_at`). A first line over 160 characters is cut (the traceback keeps all of it), so
    the place always stays on the line.
    """
    first = str(error).splitlines()[0] if str(error) else ""
    if len(first) > _MESSAGE_MAX:
        first = first[: _MESSAGE_MAX - 1] + "…"
    at = _raised_at(error)
    where = "" if at is None else f" (raised at {Path(at.filename).name}:{at.lineno} in {at.name})"
    return f"{type(error).__name__}{': ' + first if first else ''}{where}"


def env_raised(env: BatchedEnv, call: str, error: BaseException) -> str:
    """``error``, raised by ``env``'s own ``call`` (``"step"``), as every trainer says it, in one line.

    E.g. ``Pendulum-v1's step() raised ValueError: bad action (raised at myenv.py:49 in step)``.
    """
    return f"{env_label(env)}'s {call}() raised {env_fault(error)}"


class EnvCall:
    """``with EnvCall(env, "step"): env.step(actions)``: what the env's own code raises leaves as one line.

    An exception of the env's code leaves as an :class:`~fastsac_core.EnvCallError` whose message is
    :func:`env_raised`, raised ``from`` it; one of ours (a ``FastSACCoreError``, already one line: an
    env adapter's refusal of what breaks the protocol is an ``EnvOutputError``) and a ``BaseException``
    that is no ``Exception`` (``KeyboardInterrupt``) pass as they are. This is the one rule of which
    exceptions are the env's; every trainer and the app's probe ask it. Make one per env and call and
    reuse it: entering it allocates nothing, so a collector steps through one.

    Args:
        env: The env whose code runs inside.
        call: The call's name as the line says it (``"reset"``, ``"step"``).
    """

    __slots__ = ("_call", "_env")

    def __init__(self, env: BatchedEnv, call: str) -> None:
        self._env = env
        self._call = call

    def __enter__(self) -> None:
        """Nothing to set up."""

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Raise the env's exception as an ``EnvCallError`` (see the class)."""
        if isinstance(error, Exception) and not isinstance(error, FastSACCoreError):
            raise EnvCallError(env_raised(self._env, self._call, error)) from error


def _check_shape(env: BatchedEnv, call: str, name: str, value: object, shape: tuple[int, ...]) -> None:
    if not isinstance(value, np.ndarray):
        raise EnvOutputError(
            f"{env_label(env)}'s {call}() returned {name} as a {type(value).__name__}; "
            f"return a numpy array of shape {shape} (fastsac_core.env.BatchedEnv)"
        )
    if value.shape != shape:
        raise EnvOutputError(
            f"{env_label(env)}'s {call}() returned {name} of shape {value.shape}; it must be {shape} "
            f"({shape[0]} envs; sizes from its dims, fastsac_core.env.BatchedEnv)"
        )


def _check_finite(
    env: BatchedEnv, call: str, name: str, value: np.ndarray, rows: np.ndarray | None = None
) -> None:
    """Raise unless ``value`` is finite; ``rows``: the env rows ``value`` holds (default: all, in order)."""
    if value.size and not np.isfinite(value).all():
        bad = np.argwhere(~np.isfinite(value))[0]
        row = int(bad[0]) if rows is None else int(rows[bad[0]])
        raise EnvOutputError(
            f"{env_label(env)}'s {call}() returned {name} holding {value[tuple(bad)]} (env {row} of "
            f"{env.num_envs}); an env must return finite observations and rewards: look for an "
            "unstable simulation or a division by zero in the env"
        )


def _check_obs(env: BatchedEnv, call: str, obs: object, critic_obs: object) -> None:
    n, dims = env.num_envs, env.dims
    _check_shape(env, call, "observations", obs, (n, dims.obs_dim))
    _check_shape(env, call, "critic observations", critic_obs, (n, dims.critic_obs_dim))
    assert isinstance(obs, np.ndarray) and isinstance(critic_obs, np.ndarray)
    _check_finite(env, call, "observations", obs)
    if critic_obs is not obs:
        _check_finite(env, call, "critic observations", critic_obs)


def check_reset(env: BatchedEnv, obs: object, critic_obs: object) -> None:
    """Raise unless ``reset``'s (or ``restore_state``'s) arrays fit ``env``: shapes and finite values.

    Raises:
        EnvOutputError: What is wrong, naming the env and the array.
    """
    _check_obs(env, "reset", obs, critic_obs)


def check_step(env: BatchedEnv, result: StepResult) -> None:
    """Raise unless ``step``'s result fits ``env``: shapes, boolean flags, finite values.

    Raises:
        EnvOutputError: What is wrong, naming the env and the array.
    """
    n = env.num_envs
    _check_obs(env, "step", result.obs, result.critic_obs)
    _check_shape(env, "step", "rewards", result.rewards, (n,))
    _check_finite(env, "step", "rewards", result.rewards)
    for name in ("terminated", "truncated"):
        flags = getattr(result, name)
        _check_shape(env, "step", name, flags, (n,))
        integers = np.issubdtype(flags.dtype, np.integer)
        if flags.dtype != np.bool_ and not (integers and bool(((flags == 0) | (flags == 1)).all())):
            what = "holding values other than 0 and 1" if integers else f"of dtype {flags.dtype}"
            raise EnvOutputError(
                f"{env_label(env)}'s step() returned {name} {what}; return booleans (a numpy bool "
                f"array of shape ({n},))"
            )
    _check_shape(env, "step", "final_obs", result.final_obs, (n, env.dims.obs_dim))
    ended = np.flatnonzero(np.logical_or(result.terminated, result.truncated))
    if ended.size:
        _check_finite(
            env, "step", "final_obs of the episodes that ended", result.final_obs[ended], rows=ended
        )
