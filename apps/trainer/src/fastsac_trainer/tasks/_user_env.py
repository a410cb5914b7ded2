"""A user's own batched env (``task.env_factory=pkg.module:make``): its import, its factory, its checks.

The factory is recorded as text, ``module:qualname``, so that it pickles into every collector
process, is saved in the run's ``config.yaml`` and is found again by ``trainer eval`` and a resume.
It is called as ``make(num_envs, seed, **task.env_kwargs)`` and must return an object that
satisfies :class:`fastsac_core.env.BatchedEnv` (``wiki/tasks.md`` has a complete example).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastsac_core import BatchedEnv, EnvDims
from fastsac_trainer.tasks._factory import import_env_module, import_user_module
from fastsac_trainer.tasks.exceptions import TaskError, kwargs_fault

__all__ = ["UserEnvFactory", "load_target", "target_of"]

_SETTING = "task.env_factory"
_MEMBERS = ("num_envs", "dims", "reset", "step", "sample_actions", "close")


def load_target(target: str) -> Callable[..., Any]:
    """The callable that ``module:qualname`` names, imported.

    Raises:
        TaskError: The text is malformed, the module does not import, or it has no such callable.
    """
    module_name, colon, qualname = target.partition(":")
    if not colon or not module_name or not qualname:
        raise TaskError(f"{_SETTING}={target!r} is invalid: write it as package.module:function")
    found: Any = import_user_module(module_name, f"{_SETTING}={target!r}")
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if not callable(found):
        raise TaskError(
            f"{_SETTING}={target!r} is invalid: {module_name} has no callable {qualname}; "
            "name a function or class defined at the top of the module"
        )
    return found  # type: ignore[no-any-return]


def target_of(obj: object) -> str:
    """``module:qualname`` of a module-level function or class, checked to import back to ``obj``.

    Raises:
        TaskError: ``obj`` is a lambda, a local function, an instance, or lives in ``__main__``:
            neither a collector process nor ``trainer eval`` could import it.
    """
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    fix = (
        "pass a function or class defined at the top of an importable module (a .py file on "
        "PYTHONPATH), with its parameters in env_kwargs"
    )
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        raise TaskError(f"env_factory={obj!r} is invalid: it cannot be imported by name; {fix}")
    if module == "__main__":
        raise TaskError(f"env_factory={module}:{qualname} is invalid: it is defined in __main__; {fix}")
    target = f"{module}:{qualname}"
    if load_target(target) is not obj:
        raise TaskError(f"env_factory={target} is invalid: that name imports another object; {fix}")
    return target


def check_batched_env(env: Any, num_envs: int, target: str) -> BatchedEnv:
    """``env`` once it looks like a :class:`BatchedEnv` of ``num_envs`` envs with flat, bounded spaces.

    Raises:
        TaskError: A member is missing, the count differs, or the dims are not an ``EnvDims``
            with finite, ordered action bounds.
    """
    missing = [name for name in _MEMBERS if not hasattr(env, name)]
    if missing:
        raise TaskError(
            f"{_SETTING}={target!r} is invalid: it returned a {type(env).__name__} without {missing}; "
            "return an object with num_envs, dims, reset, step, sample_actions and close (wiki/tasks.md)"
        )
    dims = env.dims
    if not isinstance(dims, EnvDims):
        raise TaskError(
            f"{_SETTING}={target!r} is invalid: its dims is a {type(dims).__name__}; "
            "return a fastsac_core.EnvDims (flat observation and action sizes, action bounds)"
        )
    bounds = list(zip(dims.action_low, dims.action_high, strict=False))
    if len(bounds) != dims.act_dim or not all(
        math.isfinite(lo) and math.isfinite(hi) and lo < hi for lo, hi in bounds
    ):
        raise TaskError(
            f"{_SETTING}={target!r} is invalid: its action bounds {dims.action_low}..{dims.action_high} "
            f"are not {dims.act_dim} finite low < high pairs; give finite bounds for every action"
        )
    if env.num_envs != num_envs:
        raise TaskError(
            f"{_SETTING}={target!r} is invalid: asked for {num_envs} envs it made {env.num_envs}; "
            "build exactly num_envs environments"
        )
    return env  # type: ignore[no-any-return]


@dataclass(frozen=True, kw_only=True)
class UserEnvFactory:
    """Builds a user's batched env shard: ``load_target(target)(num_envs, seed, **env_kwargs)``.

    Plain fields, so it pickles into spawned collector processes, which import the target there.
    """

    target: str
    """``package.module:function`` (or a class) that builds the batched env."""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments passed to the target after ``num_envs`` and ``seed``."""
    env_import: str | None = None
    """Module imported before the target; None: none."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "env_kwargs", dict(self.env_kwargs))  # a copy of plain containers

    def __call__(self, num_envs: int, seed: int) -> BatchedEnv:
        """Build ``num_envs`` envs seeded from ``seed``, checked against the protocol."""
        import_env_module(self.env_import)
        make = load_target(self.target)
        try:
            env = make(num_envs, seed, **self.env_kwargs)
        except Exception as error:  # the user's code raises any type: one line, the cause kept in logs
            raise kwargs_fault(self.target, self.env_kwargs, error) or TaskError(
                f"{_SETTING}={self.target!r} is invalid: calling it failed ({type(error).__name__}: "
                f"{str(error).splitlines()[0] if str(error) else ''}); fix the factory or task.env_kwargs"
            ) from error
        try:
            return check_batched_env(env, num_envs, self.target)
        except TaskError:
            close = getattr(env, "close", None)
            if callable(close):
                close()
            raise

    @property
    def label(self) -> str:
        """What the envs are, for a console line (the factory's name)."""
        return self.target
