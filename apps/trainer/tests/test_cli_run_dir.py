"""Run folder layout, latest-checkpoint lookup and ``resume=`` resolution."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fastsac_async.run_layout import RunLayout
from fastsac_trainer import launch, train
from fastsac_trainer.config.exceptions import TrainerAppError
from fastsac_trainer.run_dir import (
    create_default_run_dir,
    create_run_dir,
    default_run_name,
    latest_checkpoint,
    release_run_dir,
    remove_untrained_run,
    resolve_resume,
)
from fastsac_trainer.testing import TINY_PENDULUM

APP_DIR = Path(__file__).resolve().parents[1]


def test_create_run_dir_makes_the_layout_and_saves_the_config(tmp_path: Path) -> None:
    """The run folder has logs/, async_errors/, checkpoints/, the resolved config.yaml and its run.lock."""
    run_dir = create_run_dir(tmp_path / "runs", "r", "seed: 3\n")
    layout = RunLayout(run_dir)
    assert set(run_dir.iterdir()) == {*layout.folders, layout.config, layout.lock}
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


def test_a_new_run_waits_out_another_launchs_look_at_its_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lock held a moment after the claim (a refused launch reading it) does not refuse the run."""
    import fcntl

    import fastsac_trainer.run_dir as run_dir_module

    claim = run_dir_module._claim

    def claim_then_looked_at(run_dir: Path, config_yaml: str, made: list[Path]) -> bool:
        claimed = claim(run_dir, config_yaml, made)
        fd = os.open(RunLayout(run_dir).lock, os.O_RDONLY | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)  # as another launch's look at the lock holds it (_holder)
        threading.Timer(0.3, os.close, [fd]).start()
        return claimed

    monkeypatch.setattr(run_dir_module, "_claim", claim_then_looked_at)
    assert create_run_dir(tmp_path, "r", "a: 1\n") == tmp_path / "r"
    release_run_dir(tmp_path / "r")


def test_default_names_of_runs_started_at_once_are_unique(tmp_path: Path) -> None:
    """Runs started in the same second with the default name each get their own folder."""
    now = time.time()
    results = _at_once(4, lambda: create_default_run_dir(tmp_path, "pendulum", "a: 1\n", now=now))
    assert all(isinstance(r, Path) for r in results), results
    base = default_run_name("pendulum", now)
    assert sorted(p.name for p in results) == [base, f"{base}-2", f"{base}-3", f"{base}-4"]  # type: ignore[union-attr]
    for folder in results:
        layout = RunLayout(folder)  # type: ignore[arg-type]
        assert set(layout.root.iterdir()) == {*layout.folders, layout.config, layout.lock}


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


def _started(run_dir: Path) -> RunLayout:
    """A run folder as a run leaves it when stopped during start-up: config, overrides, logs, events."""
    layout = RunLayout(run_dir)
    for folder in layout.folders:
        folder.mkdir(parents=True)
    for path in (layout.config, layout.overrides, layout.parent_log, layout.log("learner0")):
        path.write_text("x\n")
    (layout.events / "events.out.tfevents.1796308445.vm.23450.0").write_bytes(b"x")
    return layout


@pytest.mark.parametrize(
    "extra",
    ["", "checkpoints/model_0000000.pt", "checkpoints/best.pt", "async_errors/learner0_error.log",
     "videos/eval_0000000.mp4", "wandb_id.txt", "notes.txt", "logs/notes.txt", "link"],
)  # fmt: skip
def test_only_a_folder_of_start_up_files_is_removed(tmp_path: Path, extra: str) -> None:
    """Config, overrides, logs and event files alone go; a checkpoint, error log or other file keeps all."""
    layout = _started(tmp_path / "r")
    if extra == "link":
        (layout.root / "link").symlink_to(tmp_path)
    elif extra:
        (layout.root / extra).parent.mkdir(exist_ok=True)
        (layout.root / extra).write_bytes(b"x")
    assert remove_untrained_run(layout.root) is (not extra)
    assert layout.root.exists() is bool(extra)
    if extra:
        assert layout.config.is_file() and (layout.root / extra).exists()


@dataclass
class _StoppedDuringBoot:
    """What the asynchronous trainer returns when stopped while its workers boot."""

    iterations: int = 0
    env_steps: int = 0
    updates: int = 0
    last_checkpoint: Path | None = None
    stop_reason: str = "stopped_during_boot"


def _stopped_during_boot(*files: str) -> Callable[[bool], Callable[..., object]]:
    """A ``select_trainer`` whose trainer writes ``files`` into the run folder and stops during boot."""

    def trainer(plan: Any, reporter: Any, **kwargs: object) -> _StoppedDuringBoot:
        for name in files:
            (plan.run.run_dir / name).write_text("x\n")
        return _StoppedDuringBoot()

    return lambda asynchronous: trainer


_RUN = [*TINY_PENDULUM, "algo.trainer.asynchronous=false", "algo.trainer.device=cpu", "run_name=r"]


def test_a_new_run_stopped_during_boot_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Stopped before anything was trained, a new run's folder is removed, and the last line says so."""
    monkeypatch.setattr(launch, "select_trainer", _stopped_during_boot())
    result = train("pendulum", overrides=[*_RUN, f"runs_root={tmp_path}"])
    assert result.stop_reason == "stopped_during_boot" and not result.run_dir.exists()
    assert list(tmp_path.iterdir()) == []
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("done: ")
    assert last.endswith(f"nothing was trained, so the run folder {tmp_path / 'r'} is removed")

    # A file of the user's in it: the folder stays.
    monkeypatch.setattr(launch, "select_trainer", _stopped_during_boot("notes.txt"))
    kept = train("pendulum", overrides=[*_RUN, f"runs_root={tmp_path}"])
    assert (kept.run_dir / "notes.txt").is_file() and RunLayout(kept.run_dir).config.is_file()
    assert capsys.readouterr().out.splitlines()[-1].endswith(f"; run folder {kept.run_dir}")


@pytest.mark.slow
def test_a_resume_stopped_during_boot_keeps_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed run stopped during boot keeps its folder, whatever it holds."""
    budget = "algo.trainer.num_learning_iterations"
    first = train("pendulum", overrides=[*_RUN, f"runs_root={tmp_path}", f"{budget}=2"])
    assert first.last_checkpoint is not None
    monkeypatch.setattr(launch, "select_trainer", _stopped_during_boot())
    resumed = train("pendulum", overrides=[f"resume={first.run_dir}", f"{budget}=4"])
    assert resumed.run_dir == first.run_dir and first.last_checkpoint.is_file()


_HOLDER = """
import sys, time
from pathlib import Path
from fastsac_trainer.run_dir import hold_run_dir
hold_run_dir(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(60)
"""


def test_a_run_folder_another_live_trainer_holds_is_refused_until_it_ends(tmp_path: Path) -> None:
    """A resume into a folder another process holds names its pid; once that process is gone, it proceeds."""
    run_dir = create_run_dir(tmp_path, "r", "a: 1\n")
    release_run_dir(run_dir)  # as this process's run would at its end
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(TrainerAppError, match=rf"is in use by another trainer \(pid {holder.pid}\)"):
            create_run_dir(tmp_path, "r", "a: 2\n", resuming=True)
        RunLayout(run_dir).replay(0).write_bytes(b"x")  # no checkpoint yet: still not "stopped before"
        with pytest.raises(TrainerAppError, match=rf"run_name='r' is invalid: .* in use .*pid {holder.pid}"):
            create_run_dir(tmp_path, "r", "a: 2\n")
        assert RunLayout(run_dir).config.read_text() == "a: 1\n", "nothing was written"
    finally:
        holder.kill()
        holder.communicate(timeout=30)  # reaps it and closes its pipe
    assert create_run_dir(tmp_path, "r", "a: 2\n", resuming=True) == run_dir  # a dead holder holds nothing
    release_run_dir(run_dir)


def test_a_folder_whose_run_stopped_before_its_first_checkpoint_says_so(tmp_path: Path) -> None:
    """A new run into a folder with a replay file but no model checkpoint: nothing to resume, remove it."""
    run_dir = create_run_dir(tmp_path, "r", "a: 1\n")
    release_run_dir(run_dir)
    RunLayout(run_dir).replay(0).write_bytes(b"x")
    with pytest.raises(TrainerAppError, match=r"stopped before its first checkpoint \(nothing to resume\)"):
        create_run_dir(tmp_path, "r", "a: 1\n")


def test_a_resume_into_a_folder_no_one_can_write_names_it_and_writes_nothing(tmp_path: Path) -> None:
    """Each folder is tried for real: a logs/ where not even root can create a file is named; none written."""
    unwritable = Path("/sys/kernel")
    if not unwritable.is_dir():
        pytest.skip("no sysfs here: it is the folder no one can write into, root included")
    run_dir = create_run_dir(tmp_path, "r", "a: 1\n")
    release_run_dir(run_dir)
    logs = RunLayout(run_dir).logs
    logs.rmdir()
    logs.symlink_to(unwritable)
    with pytest.raises(TrainerAppError) as refused:
        create_run_dir(tmp_path, "r", "a: 2\n", resuming=True)
    assert str(refused.value) == (
        f"resume='{run_dir}' is invalid: the run folder must be writable and {logs} is not (Permission "
        f"denied); make it writable (chmod -R u+w {run_dir}), or resume into a new folder with "
        "run_name=NAME (runs_root=DIR)"
    )
    assert RunLayout(run_dir).config.read_text() == "a: 1\n", "nothing written"


_READ_ONLY = Path("/sys/kernel/uevent_seqnum")
"""A file no one can open for writing, root included (a read-only sysfs attribute)."""


def test_a_resume_probes_only_the_files_a_run_writes(tmp_path: Path) -> None:
    """A read-only plot, old clip or event file does not refuse a resume; a file the run rewrites does."""
    if not _READ_ONLY.is_file():
        pytest.skip("no sysfs here: its read-only files are the ones no one can write, root included")
    run_dir = create_run_dir(tmp_path, "r", "a: 1\n")
    release_run_dir(run_dir)
    layout = RunLayout(run_dir)
    layout.videos.mkdir()
    old_events = layout.events / "events.out.tfevents.1.host.1.0"  # each launch starts a new one
    for mine in (run_dir / "returns.png", layout.eval_clip(100), layout.best_checkpoint, old_events):
        mine.symlink_to(_READ_ONLY)
    assert create_run_dir(tmp_path, "r", "a: 2\n", resuming=True) == run_dir
    release_run_dir(run_dir)
    for rewritten in (layout.log("learner0"), layout.boot_profile("learner0"), layout.wandb_id):
        rewritten.symlink_to(_READ_ONLY)
        with pytest.raises(TrainerAppError, match=f"must be writable and {rewritten} is not"):
            create_run_dir(tmp_path, "r", "a: 3\n", resuming=True)
        rewritten.unlink()


@pytest.mark.parametrize("default_name", [False, True], ids=["run_name", "default-name"])
def test_a_new_run_folder_that_cannot_be_written_names_the_place_and_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, default_name: bool
) -> None:
    """A new run whose folder fails the write probe names what failed; nothing this launch made is kept."""
    import errno
    import tempfile

    runs_root = tmp_path / "runs"
    real = tempfile.TemporaryFile

    def full_in_logs(*args: Any, dir: Any = None, **kwargs: Any) -> Any:
        if dir is not None and Path(dir).name == "logs":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "TemporaryFile", full_in_logs)
    with pytest.raises(TrainerAppError) as refused:
        if default_name:
            create_default_run_dir(runs_root, "pendulum", "a: 1\n", now=0.0)
        else:
            create_run_dir(runs_root, "r", "a: 1\n")
    run_dir = runs_root / ("r" if not default_name else default_run_name("pendulum", 0.0))
    assert str(refused.value) == (
        f"runs_root='{runs_root}' is invalid: the new run folder {run_dir} must be writable and "
        f"{RunLayout(run_dir).logs} is not (No space left on device); nothing of it was kept; choose a "
        "folder you can write with runs_root=DIR"
    )
    assert not runs_root.exists(), "the run folder and the runs_root this launch made are gone"
    monkeypatch.undo()
    assert create_run_dir(runs_root, "r", "a: 1\n") == runs_root / "r", "nothing holds the name"
    release_run_dir(runs_root / "r")


def test_a_failed_new_run_keeps_a_folder_it_did_not_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's empty folder that fails the probe loses the launch's files, not the folder; names run_name."""
    import tempfile

    run_dir = tmp_path / "r"
    run_dir.mkdir()

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", refused)
    with pytest.raises(TrainerAppError) as failed:
        create_run_dir(tmp_path, "r", "a: 1\n")
    assert str(failed.value) == (
        f"run_name='r' is invalid: the run folder {run_dir} must be writable and {run_dir} is not "
        f"(Permission denied); make it writable (chmod -R u+w {run_dir}), or choose another run_name "
        "(runs_root=DIR for another folder of runs)"
    )
    assert run_dir.is_dir() and not any(run_dir.iterdir())


def _as_a_user() -> list[str]:
    """A command prefix under which permission bits bind a child as they bind a user (root's bypass gone)."""
    if os.geteuid() != 0:
        return []
    drop = "-dac_override,-dac_read_search"
    prefix = ["setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}"]
    if shutil.which("setpriv") is None or subprocess.run([*prefix, "true"], check=False).returncode:
        pytest.skip("running as root, which ignores permission bits, and setpriv cannot drop that here")
    return prefix


@pytest.mark.slow
def test_a_resume_of_a_read_only_run_folder_is_one_line_before_any_work(tmp_path: Path) -> None:
    """A resume of a run folder made read-only (chmod) exits 2 in one line naming it, before any work."""
    budget = "algo.trainer.num_learning_iterations"
    first = train("pendulum", overrides=[*_RUN, f"runs_root={tmp_path}", f"{budget}=2"])
    run_dir = first.run_dir
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != "run.lock"}
    run_dir.chmod(0o555)  # config.yaml, overrides.txt, run.lock and logs/ stay writable: only new files fail
    try:
        result = subprocess.run(
            [*_as_a_user(), sys.executable, str(APP_DIR), f"resume={run_dir}", f"{budget}=4"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    finally:
        run_dir.chmod(0o755)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines() == [  # before: TensorBoard's traceback, once the run had started
        f"error: resume='{run_dir}' is invalid: the run folder must be writable and {run_dir} is not "
        f"(Permission denied); make it writable (chmod -R u+w {run_dir}), or resume into a new folder "
        "with run_name=NAME (runs_root=DIR)"
    ]
    after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != "run.lock"}
    assert after == before, "nothing written, no TensorBoard file begun"
