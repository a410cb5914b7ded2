"""The task registry: lookup errors, overrides, factories."""

from __future__ import annotations

import dataclasses

import pytest

from fastsac_core.config import FastSACConfig
from fastsac_trainer.tasks import TASKS, TaskError, TaskSpec, UnknownTaskError, get_task, task_names


def test_unknown_task_lists_known_ones() -> None:
    """get_task on an unknown name raises an error that names it and every known task."""
    with pytest.raises(UnknownTaskError) as info:
        get_task("humanoidd")
    message = str(info.value)
    assert "humanoidd" in message
    assert all(name in message for name in task_names())


@pytest.mark.parametrize("name", sorted(TASKS))
def test_agent_config_applies_overrides(name: str) -> None:
    """A task's agent config is the recipe default with its overrides and valid C51 support."""
    spec = get_task(name)
    cfg = spec.agent_config()
    for key, value in spec.agent_overrides.items():
        assert getattr(cfg, key) == value
    assert cfg.v_min < 0 < cfg.v_max
    # The raw supports are sized for gamma 0.99 (wiki/tasks.md); another gamma needs normalised rewards.
    assert cfg.gamma == 0.99 or cfg.reward_normalization
    assert cfg.batch_size % spec.num_envs == 0
    assert spec.agent_config(batch_size=64).batch_size == 64


def test_unknown_override_field_is_rejected() -> None:
    """A TaskSpec with an override that is no FastSACConfig field fails at definition."""
    with pytest.raises(TaskError, match="gama"):
        TaskSpec(
            name="x",
            env_id="Hopper-v5",
            description="",
            num_envs=1,
            num_learning_iterations=1,
            agent_overrides={"gama": 0.9},
        )


def test_env_factory_carries_the_time_limit() -> None:
    """env_factory uses the spec's limit unless the caller overrides it."""
    spec = get_task("pendulum")
    assert spec.env_factory().max_episode_steps == spec.max_episode_steps
    assert spec.env_factory(50).max_episode_steps == 50
    assert get_task("humanoid").env_factory().env_id == "Humanoid-v5"


def test_overrides_are_read_only() -> None:
    """Overrides cannot be mutated through a spec."""
    spec = get_task("humanoid")
    with pytest.raises(TypeError):
        spec.agent_overrides["gamma"] = 0.5  # type: ignore[index]
    assert {f.name for f in dataclasses.fields(FastSACConfig)} >= set(spec.agent_overrides)
