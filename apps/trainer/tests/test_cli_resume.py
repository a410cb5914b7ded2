"""Resume keeps the run's settings: overrides.txt holds the merged overrides, one per key."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fastsac_async.run_layout import RunLayout
from fastsac_core import peek_checkpoint
from fastsac_trainer.cli import main
from fastsac_trainer.testing import TINY_PENDULUM

SYNC_TINY = [*TINY_PENDULUM, "algo.trainer.save_interval=2", "algo.trainer.asynchronous=false"]


def _train(args: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 0


@pytest.mark.slow
def test_two_resumes_in_a_row_keep_the_runs_settings(tmp_path: Path) -> None:
    """A second resume= starts from the merged overrides of the first: task, sizes and gamma stay."""
    run_dir = tmp_path / "runs" / "r"
    _train(
        [*SYNC_TINY, "algo.trainer.num_learning_iterations=4", f"runs_root={run_dir.parent}", "run_name=r"]
    )
    _train([f"resume={run_dir}", "algo.trainer.num_learning_iterations=6", "algo.agent.gamma=0.9"])
    _train([f"resume={run_dir}", "algo.trainer.num_learning_iterations=8"])

    assert peek_checkpoint(RunLayout(run_dir).checkpoint(8))["extra"]["iteration"] == 8
    saved = OmegaConf.load(RunLayout(run_dir).config)
    assert saved.task.name == "pendulum" and saved.task.num_envs == 2
    assert saved.algo.agent.gamma == 0.9, "a setting of the first resume survives the second"
    lines = RunLayout(run_dir).overrides.read_text().splitlines()
    keys = [line.partition("=")[0] for line in lines]
    assert len(keys) == len(set(keys)), f"one entry per key: {lines}"
    assert "algo.trainer.num_learning_iterations=8" in lines and "algo.agent.gamma=0.9" in lines
    assert not [line for line in lines if line.startswith(("resume=", "run_name="))], lines


def test_an_env_count_moved_for_this_machine_is_saved_for_the_resume() -> None:
    """A num_envs that sizing or the CPU profile moved is saved, so a resume on another machine keeps it."""
    from fastsac_trainer.arguments import composed as _composed

    composed = _composed(["task=humanoid", "algo.trainer.asynchronous=true", "algo.trainer.device=cpu"])
    moved = composed.run.config["task"]["num_envs"]
    assert moved != 448, "this CPU learner's profile caps the env count"
    assert f"task.num_envs={moved}" in composed.settings
    kept = _composed(["task=humanoid", "task.num_envs=448", "algo.trainer.device=cpu"])
    assert [o for o in kept.settings if o.startswith("task.num_envs=")] == ["task.num_envs=448"]
