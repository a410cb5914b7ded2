"""FastSACConfig checks itself when built; the batch splits evenly over every env of the run."""

from __future__ import annotations

from typing import Any

import pytest

from fastsac_core import ConfigError, FastSACConfig, batch_choices, batch_per_env


@pytest.mark.parametrize(
    ("setting", "value", "fix_part"),
    [
        ("actor_hidden_dim", 2, "at least 4"),
        ("critic_hidden_dim", 0, "at least 4"),
        ("num_q_networks", 0, "at least 1 critic"),
        ("num_atoms", 1, "at least 2 atoms"),
        ("actor_lr", -1e-3, "learning rate"),
        ("critic_lr", -1.0, "learning rate"),
        ("alpha_lr", -1.0, "learning rate"),
        ("weight_decay", -0.1, "weight decay"),
        ("adam_beta1", 1.0, "[0, 1)"),
        ("adam_beta2", -0.5, "[0, 1)"),
        ("max_grad_norm", -1.0, "0 (no clipping)"),
        ("gamma", 0.0, "(0, 1]"),
        ("gamma", 1.5, "(0, 1]"),
        ("tau", 0.0, "(0, 1]"),
        ("alpha_init", 0.0, "positive temperature"),
        ("buffer_size", 0, "positive per-env capacity"),
        ("batch_size", 0, "positive batch size"),
        ("batch_size", True, "positive batch size"),
        ("num_steps", 0, "n >= 1"),
        ("learning_starts", -1, "0 or more"),
        ("num_updates", 0, "at least 1 update per iteration"),
        ("num_updates", 2.5, "at least 1 update per iteration"),
        ("policy_frequency", 0, "at least 1"),
        ("normalized_v_max", 0.0, "positive bound"),
        ("normalized_v_max", float("inf"), "positive bound"),
        ("v_max", float("inf"), "finite bound"),
        ("v_min", float("-inf"), "finite bound"),
        ("log_std_max", float("nan"), "finite bound"),
        ("target_entropy_ratio", float("inf"), "finite ratio"),
        ("normalizer_eps", -1.0, "positive epsilon"),
        ("normalizer_eps", 0.0, "positive epsilon"),
        ("actor_lr", float("inf"), "learning rate"),
        ("cudagraph_scope", "kernel", "regions or step"),
        ("amp_dtype", "fp8", "bf16 or fp16"),
    ],
)
def test_each_range_rule_refuses_its_bad_value_by_name(setting: str, value: Any, fix_part: str) -> None:
    """Each field out of range is refused when built, with its name, the value seen and the fix."""
    with pytest.raises(ConfigError) as info:
        FastSACConfig(**{setting: value})
    error = info.value
    assert (error.setting, error.value) == (setting, value)
    assert fix_part in error.fix
    assert str(error) == f"agent.{setting}={value!r} is invalid: {error.fix}"
    assert "\n" not in str(error)


def test_ordered_bounds_are_checked_only_where_they_are_used() -> None:
    """v_min < v_max unless reward normalisation replaces the support; log_std_min < log_std_max always."""
    with pytest.raises(ConfigError, match=r"^agent.v_min=5.0 is invalid: use a value below v_max=5.0$"):
        FastSACConfig(v_min=5.0, v_max=5.0)
    FastSACConfig(v_min=5.0, v_max=5.0, reward_normalization=True)
    with pytest.raises(ConfigError, match=r"^agent.log_std_min=0.0 is invalid: .* log_std_max=0.0$"):
        FastSACConfig(log_std_min=0.0)


def test_the_defaults_are_valid() -> None:
    """The recipe's defaults pass every rule."""
    FastSACConfig()


def test_the_batch_splits_evenly_over_every_env() -> None:
    """batch_per_env divides the batch over the envs, or names the nearest valid sizes."""
    assert batch_per_env(8192, 512) == 16
    assert batch_choices(1000, 24) == (984, 1008)
    assert batch_choices(10, 24) == (24,)
    with pytest.raises(ConfigError) as info:
        batch_per_env(1000, 24)
    assert (info.value.setting, info.value.value) == ("batch_size", 1000)
    message = str(info.value)
    assert message.startswith("agent.batch_size=1000 is invalid: it is not divisible by the run's 24 envs")
    assert message.endswith("; use 984 or 1008")
