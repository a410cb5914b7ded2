"""The parent's log keeps a launch from its first line (Note [the parent's log tells the whole story])."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import pytest

from fastsac_async.run_layout import RunLayout
from fastsac_trainer.parent_log import ParentLog

_log = logging.getLogger("fastsac_trainer.test_parent_log")


def _run_dir(tmp_path: Path) -> Path:
    RunLayout(tmp_path).logs.mkdir()
    return tmp_path


def test_what_came_before_the_file_opened_is_written_first_in_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Records and printed lines from before open() head the file in order; later ones follow it."""
    with ParentLog() as log:
        _log.info("composed")
        log.say("placement: 1 learner")
        log.open(_run_dir(tmp_path))
        log.say("run folder: runs/r")
        log.console("t").info("a console line")
    lines = RunLayout(tmp_path).parent_log.read_text().splitlines()
    assert lines[0].endswith(" INFO fastsac_trainer.test_parent_log: composed"), lines[0]
    assert lines[1:] == ["placement: 1 learner", "run folder: runs/r", "a console line"]
    assert capsys.readouterr().out == "placement: 1 learner\nrun folder: runs/r\n"


_WARNINGS = """
import logging, sys
from pathlib import Path
from fastsac_trainer.parent_log import ParentLog

log = logging.getLogger("fastsac_trainer.test_parent_log")
with ParentLog() as parent:
    log.warning("before the folder")
    parent.open(Path(sys.argv[1]))
    parent.console("t")
    log.warning("the run's last line")
"""


def test_a_warning_shows_on_stderr_once_until_the_console_takes_over(tmp_path: Path) -> None:
    """Before the console a warning reaches stderr as Python shows it; after, only the log has it."""
    # In a process of its own: pytest's own handlers on the root logger take every record here.
    result = subprocess.run(
        [sys.executable, "-c", _WARNINGS, str(_run_dir(tmp_path))],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0 and result.stderr == "before the folder\n", result.stderr
    text = RunLayout(tmp_path).parent_log.read_text()
    assert "WARNING fastsac_trainer.test_parent_log: before the folder" in text
    assert "WARNING fastsac_trainer.test_parent_log: the run's last line" in text


def test_an_error_that_ends_the_launch_is_logged_with_its_traceback(tmp_path: Path) -> None:
    """An exception leaving the launch is written into the log (its caller prints it), traceback and all."""
    with pytest.raises(OSError, match="No space left"), ParentLog() as log:
        log.open(_run_dir(tmp_path))
        raise OSError(28, "No space left on device")
    text = RunLayout(tmp_path).parent_log.read_text()
    ended = " ERROR trainer: ended: [Errno 28] No space left on device\nTraceback (most recent call last):"
    assert ended in text
    assert not [h for h in logging.getLogger().handlers if type(h).__module__ == ParentLog.__module__]


_FULL = Path("/dev/full")


@pytest.mark.skipif(not _FULL.exists(), reason="no /dev/full, whose every write is ENOSPC")
def test_a_log_on_a_full_disk_is_said_once_and_the_launch_error_stays_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log that cannot be written raises nothing: one stderr line names it, the launch's error is kept."""
    run_dir = _run_dir(tmp_path)
    RunLayout(run_dir).parent_log.symlink_to(_FULL)
    with pytest.raises(ValueError, match="the launch's own error"), ParentLog() as log:
        _log.info("composed")
        log.open(run_dir)
        log.say("run folder: runs/r")
        log.console("t").info("a console line")
        _log.info("a record")
        raise ValueError("the launch's own error")
    captured = capsys.readouterr()
    assert captured.out == "run folder: runs/r\n"
    assert captured.err == (
        f"warning: the run's log {RunLayout(run_dir).parent_log} could not be written (No space left on "
        "device); the run goes on, the lines it could not take are missing from it\n"
    )


def test_a_log_that_cannot_be_opened_is_said_once_and_the_launch_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """open() into a folder without logs/ raises nothing; later lines are dropped without a word more."""
    with ParentLog() as log:
        log.open(tmp_path)
        log.say("run folder: runs/r")
        log.console("t").info("a console line")
    err = capsys.readouterr().err
    log_file = RunLayout(tmp_path).parent_log
    assert err.startswith(f"warning: the run's log {log_file} could not be written ("), err
    assert err.count("\n") == 1, err


def test_a_record_of_another_thread_before_open_reaches_the_file(tmp_path: Path) -> None:
    """What another thread logs before the run folder is known is written with the launch's own lines."""
    with ParentLog() as log:
        thread = threading.Thread(target=_log.info, args=("from a thread",))
        thread.start()
        thread.join(timeout=30)
        log.open(_run_dir(tmp_path))
    text = RunLayout(tmp_path).parent_log.read_text()
    assert text.endswith(" INFO fastsac_trainer.test_parent_log: from a thread\n"), text


class _SlowFile:
    """A file whose first write by the thread ``slow`` calls ``meanwhile`` first: a write caught in flight."""

    def __init__(self, file: TextIO, slow: threading.Thread, meanwhile: Callable[[], None]) -> None:
        self._file = file
        self._slow: threading.Thread | None = slow
        self._meanwhile = meanwhile

    def write(self, text: str) -> int:
        if threading.current_thread() is self._slow:
            self._slow = None
            self._meanwhile()
        return self._file.write(text)

    def close(self) -> None:
        self._file.close()


def _slow_log(monkeypatch: pytest.MonkeyPatch, slow: threading.Thread, meanwhile: Callable[[], None]) -> None:
    """Make ``logs/trainer.log``, once opened, a :class:`_SlowFile`."""
    real_open = Path.open

    def slow_open(path: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        file = real_open(path, mode, *args, **kwargs)
        return _SlowFile(file, slow, meanwhile) if path.name == "trainer.log" and mode == "a" else file

    monkeypatch.setattr(Path, "open", slow_open)


def test_a_record_of_another_thread_while_open_writes_the_kept_lines_follows_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record another thread logs while open() writes the lines it kept comes after them."""
    other = threading.Thread(target=_log.info, args=("from a thread",))

    def meanwhile() -> None:
        other.start()
        other.join(timeout=0.5)  # it waits for the handler's lock, which open() holds

    _slow_log(monkeypatch, threading.current_thread(), meanwhile)
    with ParentLog() as log:
        log.write("kept before open")
        log.open(_run_dir(tmp_path))
        other.join(timeout=30)
    lines = RunLayout(tmp_path).parent_log.read_text().splitlines()
    assert lines[0] == "kept before open" and lines[1].endswith(": from a thread"), lines


def test_an_emit_in_flight_when_the_launch_ends_is_written_before_the_file_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record another thread is writing while the log ends is written whole: no logging error."""
    in_write = threading.Event()

    def meanwhile() -> None:
        in_write.set()
        time.sleep(0.5)  # the log ends meanwhile: it waits for this write, holding the handler's lock

    emitter = threading.Thread(target=_log.info, args=("in flight",))
    _slow_log(monkeypatch, emitter, meanwhile)
    with ParentLog() as log:
        log.open(_run_dir(tmp_path))
        emitter.start()
        assert in_write.wait(timeout=30)
    emitter.join(timeout=30)
    assert "Logging error" not in capsys.readouterr().err
    assert RunLayout(tmp_path).parent_log.read_text().endswith(": in flight\n")


def test_a_line_written_from_inside_a_write_is_dropped_not_raised(tmp_path: Path) -> None:
    """A reentrant write (a signal handler's line during this thread's write) loses that line, not the run."""
    import io

    class _Reentering(io.RawIOBase):
        def __init__(self) -> None:
            self.data = b""
            self.reentered = False

        def writable(self) -> bool:
            return True

        def write(self, b: Any) -> int:
            if not self.reentered:  # as a signal handler would, inside the buffered file's own write
                self.reentered = True
                log.say("from inside the write")
            self.data += bytes(b)
            return len(b)

    raw = _Reentering()
    with ParentLog() as log:
        log.open(tmp_path)
        log._file = io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8", line_buffering=True)
        log.say("the outer line")
    assert raw.reentered
    assert b"the outer line" in raw.data and b"from inside the write" not in raw.data
