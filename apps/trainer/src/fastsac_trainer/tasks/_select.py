"""Which env a run steps, decided once from its ``task`` settings (training, resume and eval alike).

- A built-in task (``task=humanoid`` ...) steps its registered env, unwrapped (the fast path);
  the user's-env settings are refused there, so a run never trains one env with another's tuning.
- ``task=gym task.env_id=ID``: ``gymnasium.make(ID, **task.env_kwargs)`` with its registered
  wrappers kept, after importing ``task.env_import``.
- ``task=gym task.env_factory=pkg.module:make``: the user's batched env,
  ``make(num_envs, seed, **task.env_kwargs)``.

The camera of a run's videos is ``task.video_camera`` as the config holds it (the task's
``TaskSpec.video_camera`` unless the user set another; null: gymnasium's default view), or the task's
for a run folder saved before the setting existed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from fastsac_core import EnvFactory
from fastsac_trainer.tasks._factory import MujocoEnvFactory
from fastsac_trainer.tasks._registry import GYM_TASK, get_task
from fastsac_trainer.tasks._user_env import UserEnvFactory
from fastsac_trainer.tasks.exceptions import TaskError

__all__ = ["env_factory_for"]


def env_factory_for(task: Mapping[str, Any]) -> EnvFactory:
    """The picklable env factory of a run's ``task`` settings (a run folder's older ones too).

    Raises:
        TaskError: An unknown task, a user's-env setting on a built-in task, or ``task=gym``
            without exactly one of ``task.env_id`` and ``task.env_factory`` (one line each).
    """
    spec = get_task(task["name"])
    env_id, target = task.get("env_id"), task.get("env_factory")
    kwargs, module = dict(task.get("env_kwargs") or {}), task.get("env_import")
    limit = task.get("max_episode_steps")
    camera = task.get("video_camera", spec.video_camera)
    if spec is not GYM_TASK:
        given = {"env_factory": target, "env_import": module, "env_kwargs": kwargs or None}
        if env_id != spec.env_id:
            given["env_id"] = env_id
        for key, value in given.items():
            if value is not None:
                raise TaskError(
                    f"task.{key}={value!r} is invalid: task={spec.name} trains its built-in {spec.env_id} "
                    f"with settings tuned for it; use task=gym task.{key}=... for your own environment"
                )
        return dataclasses.replace(spec.env_factory(limit), video_camera=camera)
    if target is not None:
        if env_id is not None:
            raise TaskError(
                f"task.env_id={env_id!r} is invalid next to task.env_factory={target!r}; give one of them"
            )
        if limit is not None:
            raise TaskError(
                f"task.max_episode_steps={limit} is invalid with task.env_factory: a batched env keeps "
                "its own time limit; pass it in task.env_kwargs"
            )
        return UserEnvFactory(target=target, env_kwargs=kwargs, env_import=module)
    if env_id is None:
        raise TaskError(
            "task.env_id=None is invalid: task=gym needs task.env_id=<registered gymnasium id> "
            "(or task.env_factory=package.module:function)"
        )
    return MujocoEnvFactory(
        env_id=env_id, max_episode_steps=limit, env_kwargs=kwargs, env_import=module, keep_wrappers=True,
        video_camera=camera,
    )  # fmt: skip
