"""Hydra ConfigStore registration: the schema, the ``algo`` group and one ``task`` node per task.

The task nodes are generated from the task registry (``fastsac_trainer.tasks.TASKS`` and ``GYM_TASK``),
the single source of truth of each task's env, env count, budget and agent overrides; nothing is
copied into yaml.
Each task node is a ``# @package _global_`` node: it sets ``task.*`` and overrides
``algo.agent.*`` and ``algo.trainer.num_learning_iterations``.
"""

from __future__ import annotations

from typing import Any

from hydra.core.config_store import ConfigStore

from fastsac_trainer.config.schema import AlgoConfig, RootConfig
from fastsac_trainer.tasks import DEFAULT_TASK, GYM_TASK, TASKS, TaskSpec

__all__ = ["DEFAULT_TASK", "PRIMARY_CONFIG", "register_configs", "task_node"]

PRIMARY_CONFIG = "trainer"
"""Name of the primary config that ``compose`` starts from."""
DEFAULT_ALGO = "fastsac"
"""The only algorithm."""

_registered = False


def task_node(spec: TaskSpec) -> dict[str, Any]:
    """The ``_global_`` config node of one task, built from its registry entry."""
    return {
        "task": {
            "name": spec.name,
            "env_id": spec.env_id,
            "num_envs": spec.num_envs,
            "max_episode_steps": spec.max_episode_steps,
            "video_camera": spec.video_camera,
        },
        "algo": {
            "agent": dict(spec.agent_overrides),
            "trainer": {"num_learning_iterations": spec.num_learning_iterations},
        },
    }


def register_configs() -> None:
    """Register the schema, ``algo/fastsac``, every ``task/<name>`` and the primary config (once)."""
    global _registered
    if _registered:
        return
    store = ConfigStore.instance()
    store.store(name="trainer_schema", node=RootConfig)
    store.store(group="algo", name=DEFAULT_ALGO, node=AlgoConfig)
    for spec in (*TASKS.values(), GYM_TASK):
        store.store(group="task", name=spec.name, node=task_node(spec), package="_global_")
    store.store(
        name=PRIMARY_CONFIG,
        node={
            "defaults": ["trainer_schema", {"algo": DEFAULT_ALGO}, {"task": DEFAULT_TASK}, "_self_"],
        },
    )
    _registered = True
