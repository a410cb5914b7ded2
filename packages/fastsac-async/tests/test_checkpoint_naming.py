"""Checkpoint naming (``fastsac_async.spec``): what ``checkpoint_file`` writes, ``checkpoint_step`` reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastsac_async.spec import best_checkpoint_file, checkpoint_file, checkpoint_step


@pytest.mark.parametrize("gstep", [0, 7, 1000, 9_999_999, 12_345_678])
def test_checkpoint_step_reads_back_the_step_of_checkpoint_file(tmp_path: Path, gstep: int) -> None:
    """checkpoint_step(checkpoint_file(run, g)) == g, also past the seven padded digits."""
    assert checkpoint_step(checkpoint_file(tmp_path, gstep)) == gstep


def test_best_pt_is_not_a_checkpoint_of_a_step(tmp_path: Path) -> None:
    """best.pt (the best evaluation's policy) has no step."""
    assert checkpoint_step(best_checkpoint_file(tmp_path)) is None


@pytest.mark.parametrize(
    "name", [".model_0000100.pt.k3x9.tmp", "model_0000100.onnx", "model_.pt", "model_x.pt", "amodel_1.pt"]
)
def test_other_files_are_not_checkpoints_of_a_step(tmp_path: Path, name: str) -> None:
    """A partial write's temporary file and names that only resemble a checkpoint have no step."""
    assert checkpoint_step(tmp_path / "checkpoints" / name) is None
