"""Run folder layout, latest-checkpoint lookup and ``resume=`` resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.config.exceptions import TrainerAppError
from trainer.run_dir import create_run_dir, latest_checkpoint, resolve_resume


def test_create_run_dir_makes_the_layout_and_saves_the_config(tmp_path: Path) -> None:
    """The run folder has logs/, async_errors/, checkpoints/ and the resolved config.yaml."""
    run_dir = create_run_dir(tmp_path / "runs", "r", "seed: 3\n")
    assert {p.name for p in run_dir.iterdir()} == {"logs", "async_errors", "checkpoints", "config.yaml"}
    assert (run_dir / "config.yaml").read_text() == "seed: 3\n"


def test_create_run_dir_refuses_a_run_with_checkpoints_unless_resuming(tmp_path: Path) -> None:
    """An existing run with checkpoints is not overwritten by a new run of the same name."""
    run_dir = create_run_dir(tmp_path, "r", "a: 1\n")
    (run_dir / "checkpoints" / "model_0000010.pt").write_bytes(b"x")
    with pytest.raises(TrainerAppError, match="holds checkpoints already"):
        create_run_dir(tmp_path, "r", "a: 2\n")
    create_run_dir(tmp_path, "r", "a: 2\n", resuming=True)
    assert (run_dir / "config.yaml").read_text() == "a: 2\n"


def test_latest_checkpoint_is_the_highest_iteration(tmp_path: Path) -> None:
    """The latest checkpoint is chosen by iteration number, ignoring other files."""
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    names = ("model_0000900.pt", "model_0001000.pt", "model_0000100.pt", "model_0001000.onnx", "notes.txt")
    for name in names:
        (folder / name).write_bytes(b"x")
    assert latest_checkpoint(tmp_path) == folder / "model_0001000.pt"
    assert latest_checkpoint(tmp_path / "missing") is None


def test_resolve_resume_accepts_run_folder_checkpoints_folder_and_file(tmp_path: Path) -> None:
    """resume= takes a run folder, its checkpoints/ folder or a file, and finds the run folder."""
    (tmp_path / "config.yaml").write_text("task: {}\n")
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    (folder / "model_0000002.pt").write_bytes(b"x")
    (folder / "model_0000004.pt").write_bytes(b"x")
    expected = (folder / "model_0000004.pt", tmp_path)
    assert resolve_resume(str(tmp_path)) == expected
    assert resolve_resume(str(folder)) == expected
    assert resolve_resume(str(folder / "model_0000002.pt")) == (folder / "model_0000002.pt", tmp_path)
    with pytest.raises(TrainerAppError, match="no such file or folder"):
        resolve_resume(str(tmp_path / "nope"))


def test_a_loose_checkpoint_file_belongs_to_no_run_folder(tmp_path: Path) -> None:
    """A checkpoint outside a run folder (a copy): it belongs to none, so nothing is written beside it."""
    loose = tmp_path / "model_0000004.pt"
    loose.write_bytes(b"x")
    assert resolve_resume(str(loose)) == (loose, None)
    copied = tmp_path / "elsewhere" / "checkpoints" / "model_0000004.pt"  # no config.yaml above it
    copied.parent.mkdir(parents=True)
    copied.write_bytes(b"x")
    assert resolve_resume(str(copied)) == (copied, None)
