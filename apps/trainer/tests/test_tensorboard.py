"""TensorBoard events carry the DESIGN metric names and values, read back with EventAccumulator."""

from __future__ import annotations

import math
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from trainer.reporting import Snapshot
from trainer.tensorboard import TensorBoardReporter, collector_stage_means

DESIGN_NAMES = (
    "perf/env_steps_per_s",
    "perf/updates_per_s",
    "perf/learn_pct",
    "perf/collect_ms_per_batch",
    "async/policy_lag",
    "async/policy_lag_collector0",
    "async/ring_fill",
    "async/utd",
    "async/weight_version",
    "rollout/mean_return",
    "rollout/mean_ep_len",
    "train/qf_loss",
    "train/actor_loss",
    "train/alpha",
    "train/alpha_loss",
    "train/policy_entropy",
    "train/qf_max",
)


def _snapshot(iteration: int) -> Snapshot:
    return Snapshot(
        iteration=iteration,
        env_steps=iteration * 8,
        total_env_steps=800,
        elapsed_s=float(iteration),
        scalars={name: float(iteration * (i + 1)) for i, name in enumerate(DESIGN_NAMES)}
        | {"train/not_finite": math.nan},
        timing={"collector0": {"env_step": 2.0, "push": 1.0}, "collector1": {"env_step": 4.0, "push": 3.0}},
    )


def test_events_hold_design_names_steps_and_values(tmp_path: Path) -> None:
    """Every scalar is written under its DESIGN name at the global step; NaNs are skipped."""
    writer = TensorBoardReporter(tmp_path)
    for iteration in (10, 20):
        writer.report(_snapshot(iteration))
    writer.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert set(DESIGN_NAMES) <= tags
    assert "train/not_finite" not in tags
    for i, name in enumerate(DESIGN_NAMES):
        assert [(e.step, e.value) for e in events.Scalars(name)] == [
            (10, 10.0 * (i + 1)),
            (20, 20.0 * (i + 1)),
        ]
    assert [e.value for e in events.Scalars("perf/collector_env_step_ms")] == [3.0, 3.0]
    assert [e.value for e in events.Scalars("perf/collector_push_ms")] == [2.0, 2.0]


def test_stage_means_come_from_collector_groups_only() -> None:
    """Collector stage means are derived from the collector groups, not learners or the sync loop."""
    means = collector_stage_means(
        {"collector0": {"wait": 1.0}, "learner0": {"update": 9.0}, "sync": {"x": 1.0}}
    )
    assert means == {"perf/collector_wait_ms": 1.0}


def test_a_resumed_run_hides_the_events_its_last_launch_wrote_past_the_checkpoint(tmp_path: Path) -> None:
    """Resuming the checkpoint of iteration 20: the first launch's points after 20 are gone, no zig-zag."""
    first = TensorBoardReporter(tmp_path)
    for iteration in (10, 20, 30):  # it stopped at 30, its last checkpoint was at 20
        first.report(_snapshot(iteration))
    first.close()
    second = TensorBoardReporter(tmp_path, resumed_at=20)
    for iteration in (25, 35):
        second.report(_snapshot(iteration))
    second.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [e.step for e in events.Scalars("train/qf_loss")] == [10, 20, 25, 35]
