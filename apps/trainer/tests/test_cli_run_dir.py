"""Run folder layout, latest-checkpoint lookup and ``resume=`` resolution."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fastsac_async.run_layout import RunLayout
from fastsac_trainer.config.exceptions import TrainerAppError
from fastsac_trainer.run_dir import (
    create_default_run_dir,
    create_run_dir,
    default_run_name,
    latest_checkpoint,
    resolve_resume,
)


def test_create_run_dir_makes_the_layout_and_saves_the_config(tmp_path: Path) -> None:
    """The run folder has logs/, async_errors/, checkpoints/ and the resolved config.yaml."""
    run_dir = create_run_dir(tmp_path / "runs", "r", "seed: 3\n")
    layout = RunLayout(run_dir)
    assert set(run_dir.iterdir()) == {*layout.folders, layout.config}
    assert RunLayout(run_dir).config.read_text() == "seed: 3\n"


def test_create_run_dir_refuses_a_run_with_checkpoints_unless_resuming(tmp_path: Path) -> None:
    """An existing run with checkpoints is not overwritten by a new run of the same name."""
    run_dir = create_run_dir(tmp_path, "r", "a: 1\n")
    RunLayout(run_dir).checkpoint(10).write_bytes(b"x")
    with pytest.raises(TrainerAppError, match="holds checkpoints already"):
        create_run_dir(tmp_path, "r", "a: 2\n")
    create_run_dir(tmp_path, "r", "a: 2\n", resuming=True)
    assert RunLayout(run_dir).config.read_text() == "a: 2\n"


def test_latest_checkpoint_is_the_highest_iteration(tmp_path: Path) -> None:
    """The latest checkpoint is the highest iteration; best.pt, partial writes and other files are ignored."""
    folder = RunLayout(tmp_path).checkpoints
    folder.mkdir()
    names = ("model_0000900.pt", "model_0001000.pt", "model_0000100.pt", "model_0001000.onnx", "notes.txt",
             "best.pt", ".model_0002000.pt.k3x9.tmp")  # fmt: skip
    for name in names:
        (folder / name).write_bytes(b"x")
    assert latest_checkpoint(tmp_path) == folder / "model_0001000.pt"
    assert latest_checkpoint(tmp_path / "missing") is None


def test_resolve_resume_accepts_run_folder_checkpoints_folder_and_file(tmp_path: Path) -> None:
    """resume= takes a run folder, its checkpoints/ folder or a file, and finds the run folder."""
    RunLayout(tmp_path).config.write_text("task: {}\n")
    folder = RunLayout(tmp_path).checkpoints
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
    copied = RunLayout(tmp_path / "elsewhere").checkpoint(4)  # no config.yaml above it
    copied.parent.mkdir(parents=True)
    copied.write_bytes(b"x")
    assert resolve_resume(str(copied)) == (copied, None)


def _at_once(count: int, create: Callable[[], Path]) -> list[Path | TrainerAppError]:
    """Run ``create`` in ``count`` threads released together; each result or its TrainerAppError."""
    barrier = threading.Barrier(count)
    results: list[Path | TrainerAppError] = []
    lock = threading.Lock()

    def one() -> None:
        barrier.wait(timeout=10)
        try:
            result: Path | TrainerAppError = create()
        except TrainerAppError as error:
            result = error
        with lock:
            results.append(result)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(results) == count
    return results


def test_new_runs_of_one_name_at_once_get_the_folder_once(tmp_path: Path) -> None:
    """Of runs created at once with one run_name, exactly one gets the folder; the others are refused."""
    results = _at_once(4, lambda: create_run_dir(tmp_path, "r", "a: 1\n"))
    made = [r for r in results if isinstance(r, Path)]
    refused = [str(r) for r in results if isinstance(r, TrainerAppError)]
    assert made == [tmp_path / "r"] and len(refused) == 3, results
    assert all(line.startswith("run_name='r' is invalid: ") for line in refused), refused


def test_default_names_of_runs_started_at_once_are_unique(tmp_path: Path) -> None:
    """Runs started in the same second with the default name each get their own folder."""
    now = time.time()
    results = _at_once(4, lambda: create_default_run_dir(tmp_path, "pendulum", "a: 1\n", now=now))
    assert all(isinstance(r, Path) for r in results), results
    base = default_run_name("pendulum", now)
    assert sorted(p.name for p in results) == [base, f"{base}-2", f"{base}-3", f"{base}-4"]  # type: ignore[union-attr]
    for folder in results:
        layout = RunLayout(folder)  # type: ignore[arg-type]
        assert set(layout.root.iterdir()) == {*layout.folders, layout.config}


def test_a_new_run_never_writes_into_a_non_empty_folder(tmp_path: Path) -> None:
    """run_name= of a folder that holds anything is refused without resume=; an empty folder is used."""
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine\n")
    with pytest.raises(TrainerAppError, match=r"^run_name='taken' is invalid: .* is not empty; choose"):
        create_run_dir(tmp_path, "taken", "a: 1\n")
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]
    (tmp_path / "empty").mkdir()
    assert create_run_dir(tmp_path, "empty", "a: 1\n") == tmp_path / "empty"


def test_a_resume_removes_the_partial_checkpoint_a_kill_left(tmp_path: Path) -> None:
    """A checkpoint write cut short by a kill leaves a temporary file; resuming into the folder removes it."""
    run_dir = create_run_dir(tmp_path, "r", "a: 1\n")
    partial = RunLayout(run_dir).checkpoints / ".model_0000010.pt.abc123.tmp"
    partial.write_bytes(b"torn")
    kept = RunLayout(run_dir).checkpoint(8)
    kept.write_bytes(b"x")
    create_run_dir(tmp_path, "r", "a: 2\n", resuming=True)
    assert not partial.exists() and kept.exists()
