"""The parent's log keeps a launch from its first line (Note [the parent's log tells the whole story])."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

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
