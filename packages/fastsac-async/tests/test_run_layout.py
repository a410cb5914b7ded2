"""The run folder's layout (``fastsac_async.run_layout``): the names users see, and what reads them back."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastsac_async import RunLayout, checkpoint_step

NAMES = {
    "config": "config.yaml",
    "overrides": "overrides.txt",
    "logs": "logs",
    "parent_log": "logs/trainer.log",
    "errors": "async_errors",
    "checkpoints": "checkpoints",
    "best_checkpoint": "checkpoints/best.pt",
    "videos": "videos",
    "events": ".",
    "wandb_id": "wandb_id.txt",
    "wandb_files": "wandb",
    "rendezvous": "ddp_rendezvous",
}
"""Each path of the layout, relative to the run folder (shared/DESIGN.md, "Run folder"; wiki/trainer.md)."""


@pytest.mark.parametrize(("attribute", "relative"), NAMES.items())
def test_each_path_of_the_run_folder_has_its_documented_name(attribute: str, relative: str) -> None:
    """Every path the layout gives lies in the run folder, under the name users are told."""
    layout = RunLayout(Path("runs/r"))
    assert getattr(layout, attribute) == layout.root / relative


def test_the_paths_of_a_worker_a_step_and_a_host() -> None:
    """A worker's log and error log, a step's checkpoint and clip, and another host's folder."""
    layout = RunLayout(Path("runs/r"))
    assert layout.log("collector3") == layout.root / "logs/collector3.log"
    assert layout.boot_profile("learner0") == layout.root / "logs/learner0.boot.prof"
    assert layout.written_before_training(layout.boot_profile("learner0"))
    assert not layout.written_before_training(layout.logs / "mine.prof"), "only the layout's own profiles"
    assert layout.error_log("learner1") == layout.root / "async_errors/learner1_error.log"
    assert layout.checkpoint(100) == layout.root / "checkpoints/model_0000100.pt"
    assert layout.eval_clip(42) == layout.root / "videos/eval_0000042.mp4"
    assert layout.video("model_0000003") == layout.root / "videos/model_0000003.mp4"
    assert layout.host(2).config == layout.root / "host2/config.yaml"
    assert set(layout.folders) == {layout.logs, layout.errors, layout.checkpoints}
    assert str(RunLayout(Path()).parent_log) == "logs/trainer.log", "relative to the run folder, for messages"


@pytest.mark.parametrize("gstep", [0, 7, 1000, 9_999_999, 12_345_678])
def test_checkpoint_step_reads_back_the_step_of_a_checkpoint(tmp_path: Path, gstep: int) -> None:
    """checkpoint_step(RunLayout(run).checkpoint(g)) == g, also past the seven padded digits."""
    assert checkpoint_step(RunLayout(tmp_path).checkpoint(gstep)) == gstep


def test_best_pt_is_not_a_checkpoint_of_a_step(tmp_path: Path) -> None:
    """best.pt (the best evaluation's policy) has no step."""
    assert checkpoint_step(RunLayout(tmp_path).best_checkpoint) is None


@pytest.mark.parametrize(
    "name", [".model_0000100.pt.k3x9.tmp", "model_0000100.onnx", "model_.pt", "model_x.pt", "amodel_1.pt"]
)
def test_other_files_are_not_checkpoints_of_a_step(tmp_path: Path, name: str) -> None:
    """A partial write's temporary file and names that only resemble a checkpoint have no step."""
    assert checkpoint_step(RunLayout(tmp_path).checkpoints / name) is None


def test_a_checkpoint_leads_back_to_its_run_folder(tmp_path: Path) -> None:
    """holding(checkpoint) is the run whose checkpoints/ holds it, once that run has its config.yaml."""
    layout = RunLayout(tmp_path / "r")
    checkpoint = layout.checkpoint(5)
    assert RunLayout.holding(checkpoint) is None, "no config.yaml: not a run folder"
    layout.root.mkdir()
    layout.config.write_text("seed: 1\n")
    assert RunLayout.holding(checkpoint) == layout
    assert RunLayout.holding(layout.best_checkpoint) == layout
    assert RunLayout.holding(layout.root / checkpoint.name) is None, "beside config.yaml, not in checkpoints/"


def test_a_run_folder_or_its_checkpoints_folder_is_the_run(tmp_path: Path) -> None:
    """of_folder(run) and of_folder(run/checkpoints) are the same run; any other folder is its own."""
    layout = RunLayout(tmp_path / "r")
    assert RunLayout.of_folder(layout.root) == RunLayout.of_folder(layout.checkpoints) == layout
    assert RunLayout.of_folder(layout.logs) == RunLayout(layout.logs)
