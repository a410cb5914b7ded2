"""TensorBoard events carry the DESIGN metric names and values, read back with EventAccumulator."""

from __future__ import annotations

import math
from pathlib import Path

from tensorboard.backend.event_processing import plugin_event_accumulator
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fastsac_trainer.reporting import Snapshot
from fastsac_trainer.tensorboard import ITERATION, TensorBoardReporter, collector_stage_means

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
    """Every scalar is under its DESIGN name at its env step; NaNs are skipped; iteration is a scalar."""
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
            (80, 10.0 * (i + 1)),
            (160, 20.0 * (i + 1)),
        ]
    assert [(e.step, e.value) for e in events.Scalars(ITERATION)] == [(80, 10.0), (160, 20.0)]
    assert [e.value for e in events.Scalars("perf/collector_env_step_ms")] == [3.0, 3.0]
    assert [e.value for e in events.Scalars("perf/collector_push_ms")] == [2.0, 2.0]


def test_stage_means_come_from_collector_groups_only() -> None:
    """Collector stage means are derived from the collector groups, not learners or the sync loop."""
    means = collector_stage_means(
        {"collector0": {"wait": 1.0}, "learner0": {"update": 9.0}, "sync": {"x": 1.0}}
    )
    assert means == {"perf/collector_wait_ms": 1.0}


def test_a_resumed_run_hides_the_events_its_last_launch_wrote_past_the_checkpoint(tmp_path: Path) -> None:
    """Resuming the checkpoint of iteration 20 (160 env steps): the first launch's later points are gone."""
    first = TensorBoardReporter(tmp_path)
    for iteration in (10, 20, 30):  # it stopped at 30, its last checkpoint was at 20
        first.report(_snapshot(iteration))
    first.close()
    second = TensorBoardReporter(tmp_path, resumed_at_env_steps=20 * 8)
    for iteration in (25, 35):
        second.report(_snapshot(iteration))
    second.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [e.step for e in events.Scalars("train/qf_loss")] == [8 * it for it in (10, 20, 25, 35)]


def test_tensorboards_own_loader_hides_them_too_and_the_files_keep_both(tmp_path: Path) -> None:
    """TensorBoard's Python loader (--load_fast=false) shows the resumed curve; unpurged, both launches."""
    first = TensorBoardReporter(tmp_path)
    for iteration in (10, 20, 30):
        first.report(_snapshot(iteration))
    first.close()
    second = TensorBoardReporter(tmp_path, resumed_at_env_steps=20 * 8)
    for iteration in (25, 35):
        second.report(_snapshot(iteration))
    second.close()
    shown = {}
    for purge in (True, False):
        events = plugin_event_accumulator.EventAccumulator(str(tmp_path), purge_orphaned_data=purge)
        events.Reload()
        shown[purge] = [(e.step, e.wall_time) for e in events.Tensors("train/qf_loss")]
    assert [step for step, _ in shown[True]] == [8 * it for it in (10, 20, 25, 35)]
    assert [step for step, _ in shown[False]] == [8 * it for it in (10, 20, 30, 25, 35)]
    killed_tail, resumed = shown[False][2], shown[False][3:]
    assert all(killed_tail[1] <= wall for _, wall in resumed), "the killed launch's point is the earlier one"


def test_runs_with_different_env_counts_line_up_in_env_steps(tmp_path: Path) -> None:
    """Two runs at the same env steps with 8 and 32 envs share x values; their iterations differ."""
    for name, num_envs, iteration in (("a", 8, 40), ("b", 32, 10)):
        writer = TensorBoardReporter(tmp_path / name)
        writer.report(Snapshot(iteration=iteration, env_steps=iteration * num_envs, total_env_steps=640,
                               elapsed_s=1.0, scalars={"rollout/mean_return": 1.0}))  # fmt: skip
        writer.close()
    steps = {}
    for name in ("a", "b"):
        events = EventAccumulator(str(tmp_path / name))
        events.Reload()
        steps[name] = [(e.step, e.value) for e in events.Scalars(ITERATION)]
    assert steps == {"a": [(320, 40.0)], "b": [(320, 10.0)]}


def test_config_is_written_as_text_and_hparams(tmp_path: Path) -> None:
    """The run's config is readable back as YAML text and as dotted hparams with the values given."""
    from omegaconf import OmegaConf
    from tensorboard.plugins.hparams import plugin_data_pb2

    config = {"task": {"name": "pendulum", "num_envs": 4, "max_episode_steps": None}, "seed": 3}
    TensorBoardReporter(tmp_path, config=config).close()
    events = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    events.Reload()
    text = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert OmegaConf.to_container(OmegaConf.create(text.strip("`").removeprefix("yaml\n"))) == config
    content = events.SummaryMetadata("_hparams_/session_start_info").plugin_data.content
    start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    hp = {k: v.ListFields()[0][1] for k, v in start.hparams.items()}
    assert hp == {
        "task.name": "pendulum",
        "task.num_envs": 4.0,
        "task.max_episode_steps": "null",
        "seed": 3.0,
    }
