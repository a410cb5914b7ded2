"""AsyncOptions and EngineSpec check their own values when built (the engine trusts what exists)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from fastsac_async.config import AsyncOptions
from fastsac_async.exceptions import AsyncConfigError
from fastsac_async.spec import EngineSpec, TrainingRun
from fastsac_async.testing import FakeEnvFactory, cpu_topology
from fastsac_core import FastSACConfig


@pytest.mark.parametrize("spin_s", [-0.1, 5.0])
def test_a_collector_spin_outside_0_to_1_s_is_refused_before_anything_starts(spin_s: float) -> None:
    """collector_spin_s outside [0, 1] s: AsyncConfigError naming the setting, the value and the range."""
    spec = AsyncOptions()
    with pytest.raises(AsyncConfigError, match=rf"collector_spin_s={spin_s} is invalid: use 0 .* up to 1 s"):
        dataclasses.replace(spec, collector_spin_s=spin_s)


def test_an_unknown_ingest_mode_is_refused_before_anything_starts() -> None:
    """An unknown ingest mode: AsyncConfigError naming the setting, the value and the modes."""
    expected = r"ingest='lockstep' is invalid: use generations or ragged \(the default\)"
    with pytest.raises(AsyncConfigError, match=expected):
        AsyncOptions(ingest="lockstep")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("setting", "value", "fix_part"),
    [
        ("num_collectors", 0, "at least 1 collector"),
        ("num_learners", True, "at least 1 learner"),
        ("cpus_per_collector", 0, "None (unpinned)"),
        ("ring_capacity", 0, "positive slot count"),
        ("max_lead", 0, "positive slot count, or None"),
        ("utd_mode", "fast", "strict or learner_bound"),
        ("weight_publish_interval", 0, "positive number of updates"),
        ("weight_poll_interval", -1, "positive number of env steps"),
        ("max_ingest_per_iter", 0, "positive number of slots"),
        ("idle_sleep_s", -1.0, "0 or a positive"),
        ("transition_ipc", "yes", "auto, on or off"),
        ("weight_ipc", True, "auto, on or off"),
        ("weight_ipc_min_bytes", -1, "0 or a positive byte count"),
        ("boot_timeout_s", 0.0, "positive number of seconds"),
    ],
)
def test_every_invalid_option_names_the_setting_the_value_and_the_fix(
    setting: str, value: Any, fix_part: str
) -> None:
    """An out-of-range option raises at construction, naming the field, the value seen and a fix."""
    with pytest.raises(AsyncConfigError) as info:
        AsyncOptions(**{setting: value})
    error = info.value
    assert (error.setting, error.value) == (setting, value)
    assert fix_part in error.fix
    assert str(error) == f"async_options.{setting}={value!r} is invalid: {error.fix}"


def test_the_defaults_are_valid() -> None:
    """AsyncOptions() builds: every default passes its own rule."""
    assert AsyncOptions().ring_capacity == 64


def test_only_strict_collectors_wait_at_the_lead() -> None:
    """max_lead bounds strict collectors (4 by default) below a full ring; learner_bound: the ring only."""
    assert AsyncOptions().collector_lead() == 4
    assert AsyncOptions(max_lead=2).collector_lead() == 2
    assert AsyncOptions(max_lead=None).collector_lead() is None
    assert AsyncOptions(ring_capacity=4).collector_lead() is None  # a full ring is the same bound
    assert AsyncOptions(ring_capacity=2, max_lead=8).collector_lead() is None
    assert AsyncOptions(utd_mode="learner_bound", max_lead=2).collector_lead() is None


def test_an_engine_spec_refuses_options_that_disagree_with_its_topology(tmp_path: Path) -> None:
    """EngineSpec: options counting other workers than the topology places is refused, naming both counts."""
    factory = FakeEnvFactory()
    run = TrainingRun(env_factory=factory, dims=factory(1, 0).dims, seed=0, num_iterations=1,
                      logging_interval=1, save_interval=0, run_dir=tmp_path)  # fmt: skip
    fields: dict[str, Any] = dict(
        run=run,
        topology=cpu_topology(num_envs=8, num_collectors=2, num_learners=1, batch_size=16),
        agent=FastSACConfig(batch_size=16),
    )
    spec = EngineSpec(options=AsyncOptions(num_collectors=2), **fields)
    assert (spec.num_collectors, spec.num_learners) == (2, 1)
    message = "async_options.num_collectors=4 is invalid: the topology places 2"
    with pytest.raises(AsyncConfigError, match=re.escape(message)):
        EngineSpec(options=AsyncOptions(num_collectors=4), **fields)
