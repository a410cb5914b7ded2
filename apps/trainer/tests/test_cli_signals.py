"""Stopping a CLI run from outside, in real subprocesses: SIGTERM, SIGHUP, a closed stdout, a second signal.

Each run is the tiny pendulum task on CPU. "Nothing left" is checked here for the run's own workers
(an orphan would escape the conftest guard, which only sees descendants) and for Python's
resource_tracker, which reports a semaphore nobody released on the run's stderr; the conftest guard
checks /dev/shm and the direct children.
"""

from __future__ import annotations

import os
import queue
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from fastsac_async.run_layout import RunLayout
from fastsac_core import peek_checkpoint, peek_replay
from fastsac_trainer.testing import TINY_PENDULUM

APP_DIR = Path(__file__).resolve().parents[1]
TINY = [*TINY_PENDULUM, "algo.trainer.save_interval=100000", "algo.trainer.device=cpu", "runs_root=runs"]
ASYNC = ["algo.trainer.asynchronous=true", "algo.trainer.async_options.num_collectors=2"]
SYNC = ["algo.trainer.asynchronous=false"]
LONG = "algo.trainer.num_learning_iterations=1000000"
_ITERATION_LINE = re.compile(r"\] it (\d+) ")


class _Run:
    """A CLI run in a subprocess whose output is read by threads (so every wait is bounded)."""

    def __init__(self, cwd: Path, args: list[str]) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, str(APP_DIR), *args],
            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.lines.put), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err.append), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: IO[str] | None, put: Callable[[str | None], None]) -> None:
        assert stream is not None
        try:
            for line in stream:
                put(line)
        except (OSError, ValueError):  # the test closed the pipe
            pass
        put(None)

    def wait_for(self, pattern: str, timeout_s: float = 120.0) -> str:
        """The first stdout line that contains ``pattern``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no line with {pattern!r} within {timeout_s} s:\n{''.join(self.out)}")
            if line is None:
                pytest.fail(f"stdout ended before a line with {pattern!r}:\n{''.join(self.out)}")
            self.out.append(line)
            if pattern in line:
                return line

    def finish(self, timeout_s: float) -> tuple[int, str, str]:
        """Wait (bounded) for the exit and the end of its output; (exit code, stdout, stderr).

        stderr ends when the run's resource tracker exits too: its warnings are in it.
        """
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.close()
            pytest.fail(f"the run did not exit within {timeout_s} s:\n{''.join(self.out)}{self._err()}")
        for reader in self._readers:
            reader.join(30.0)
        while not self.lines.empty():
            line = self.lines.get()
            if line is not None:
                self.out.append(line)
        return self.proc.returncode, "".join(self.out), self._err()

    def _err(self) -> str:
        return "".join(line for line in self.err if line is not None)

    def close(self) -> None:
        """Kill the run if it still runs; close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        for reader in self._readers:
            reader.join(30.0)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def _worker_pids(run_dir: Path) -> list[int]:
    logs = [p for p in RunLayout(run_dir).logs.glob("*.log") if p.name != "trainer.log"]
    return [int(m.group(1)) for p in logs for m in re.finditer(r"started \(pid (\d+)", p.read_text())]


def _assert_nothing_left(run_dir: Path, err: str) -> None:
    for pid in _worker_pids(run_dir):
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text(), pid
    assert "resource_tracker" not in err, err
    assert "Traceback" not in err, err
    assert not list(RunLayout(run_dir).checkpoints.glob(".*.tmp")), "a partial checkpoint was left"


def _final_iteration(out: str) -> int:
    match = re.search(r"checkpoints/model_(\d+)\.pt, stop_reason=", out)
    assert match, out
    return int(match.group(1))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "sig"),
    [("async", signal.SIGTERM), ("sync", signal.SIGTERM), ("sync", signal.SIGHUP), ("sync", signal.SIGUSR1)],
    ids=["async-SIGTERM", "sync-SIGTERM", "sync-SIGHUP", "sync-SIGUSR1"],  # async SIGHUP: closed terminal
)
def test_a_stop_signal_mid_run_ends_cleanly_with_a_checkpoint_that_resume_continues(
    tmp_path: Path, mode: str, sig: signal.Signals
) -> None:
    """SIGTERM/SIGHUP/SIGUSR1 mid-run: exit 0, stop_reason names it; resume= continues checkpoint, replay."""
    trainer = ASYNC if mode == "async" else SYNC
    run = _Run(tmp_path, [*TINY, *trainer, LONG, "run_name=r"])
    try:
        run.wait_for("] it ")
        sent = time.monotonic()
        run.proc.send_signal(sig)
        code, out, err = run.finish(timeout_s=60)
    finally:
        run.close()
    stopped_s = time.monotonic() - sent
    assert code == 0, out + err
    assert f"stop requested ({sig.name})" in out, out
    assert f"stop_reason={sig.name};" in out, out
    assert stopped_s < 30, stopped_s
    run_dir = tmp_path / "runs" / "r"
    _assert_nothing_left(run_dir, err)
    log = RunLayout(run_dir).parent_log.read_text()
    assert f"stop_reason={sig.name}" in log and "(exit 0)" in log
    saved = _final_iteration(out)
    assert peek_checkpoint(RunLayout(run_dir).checkpoint(saved))["extra"]["iteration"] == saved
    replay = peek_replay(RunLayout(run_dir).replay(0))  # written with the final checkpoint
    assert replay.gstep == saved and replay.transitions > 0

    if sig != signal.SIGTERM:
        return  # resuming the checkpoint of another signal's stop is the same path as SIGTERM's
    budget = saved + 4
    resumed = _Run(tmp_path, [f"resume={run_dir}", f"algo.trainer.num_learning_iterations={budget}"])
    try:
        code, out, err = resumed.finish(timeout_s=120)
    finally:
        resumed.close()
    assert code == 0, out + err
    checkpoint = RunLayout(run_dir).checkpoint(saved)
    assert f"resuming from {checkpoint} (iteration {saved}); replay buffer of" in out
    assert f" {replay.transitions:,} transitions from iteration {saved}, written " in out, out
    assert _final_iteration(out) >= budget and "stop_reason=completed" in out
    _assert_nothing_left(run_dir, err)
    restored = f"replay buffer restored from {RunLayout(run_dir).replay(0)}: {replay.transitions} transitions"
    if mode == "async":  # the learner restores its own shard; its collectors restart their episodes
        assert f"learner0: {restored} of gstep {saved}" in RunLayout(run_dir).log("learner0").read_text()
    else:  # the envs' state came with it: every episode continues
        log = RunLayout(run_dir).parent_log.read_text()
        assert f"{restored} of iteration {saved}; the episodes continue" in log


_WITH_TERMINAL = """
import fcntl, os, sys, termios
fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # started with start_new_session, it takes the pty as its terminal
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


@pytest.mark.slow
def test_closing_the_terminal_of_an_async_run_stops_it_cleanly(tmp_path: Path) -> None:
    """The terminal closed (SIGHUP to every process, writes fail with EIO): exit 0, checkpoint, no leak."""
    master, slave = os.openpty()
    args = [*TINY, *ASYNC, LONG, "run_name=r", "console=auto"]  # auto: the rich live panel on the pty
    proc = subprocess.Popen(
        [sys.executable, "-c", _WITH_TERMINAL, str(APP_DIR), *args],
        cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="1"), stdin=slave, stdout=slave,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    reading = threading.Event()
    reading.set()

    def drain() -> None:  # like a terminal: take everything the run draws
        while reading.is_set():
            if select.select([master], [], [], 0.1)[0]:
                try:
                    os.read(master, 65536)
                except OSError:
                    return

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    log = RunLayout(tmp_path / "runs" / "r").parent_log
    try:
        deadline = time.monotonic() + 120
        while "] it " not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "] it " in log.read_text(), "the run reached training"
        reading.clear()
        reader.join(10.0)
        os.close(master)  # the terminal window closes
        closed = time.monotonic()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    stopped_s = time.monotonic() - closed
    assert proc.returncode == 0, err
    assert stopped_s < 30, stopped_s
    run_dir = tmp_path / "runs" / "r"
    _assert_nothing_left(run_dir, err)
    text = log.read_text()
    assert "stop requested (SIGHUP)" in text and "stop_reason=SIGHUP" in text and "(exit 0)" in text, text
    assert all("most recent call first" not in p.read_text() for p in RunLayout(run_dir).logs.glob("*.log"))


@pytest.mark.slow
def test_a_closed_stdout_never_stops_the_run_and_the_log_keeps_every_line(tmp_path: Path) -> None:
    """The parent's stdout closed mid-run: training and its log go on; SIGTERM still ends it cleanly."""
    run = _Run(tmp_path, [*TINY, *ASYNC, LONG, "run_name=r"])
    log_path = RunLayout(tmp_path / "runs" / "r").parent_log
    try:
        run.wait_for("] it ")
        assert run.proc.stdout is not None
        run.proc.stdout.close()  # like `trainer ... | head` once head exits
        # The budget is endless, so the console writes again after the close, whenever that is.
        lost_at = _wait_for_log(log_path, lambda text: "stdout was closed (BrokenPipeError" in text)
        iteration_at_loss = _last_iteration(lost_at)
        _wait_for_log(log_path, lambda text: _last_iteration(text) >= iteration_at_loss + 20)
        run.proc.send_signal(signal.SIGTERM)
        code, _, err = run.finish(timeout_s=60)
    finally:
        run.close()
    assert code == 0, err
    run_dir = tmp_path / "runs" / "r"
    _assert_nothing_left(run_dir, err)
    log = log_path.read_text()
    assert "stop_reason=SIGTERM" in log and "(exit 0)" in log, log
    saved = _final_iteration(log)
    assert saved >= iteration_at_loss + 20, log
    assert peek_checkpoint(RunLayout(run_dir).checkpoint(saved))["extra"]["iteration"] == saved


def _last_iteration(log: str) -> int:
    return max((int(i) for i in _ITERATION_LINE.findall(log)), default=0)


def _wait_for_log(path: Path, done: Callable[[str], bool], timeout_s: float = 120.0) -> str:
    """The log's text once ``done`` holds for it (bounded)."""
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if done(text):
            return text
        time.sleep(0.1)
    pytest.fail(f"{path} did not reach the expected state within {timeout_s} s:\n{text}")


@pytest.mark.slow
@pytest.mark.parametrize("cause", ["second SIGTERM", "grace period"])
def test_a_second_sigterm_or_the_grace_period_during_the_final_checkpoint_stops_at_once(
    tmp_path: Path, cause: str
) -> None:
    """A second SIGTERM (or stop_grace_s) before the final checkpoint: exit 143 in seconds, nothing left."""
    # Big critic updates in long chunks: the learner needs seconds to reach its final checkpoint.
    slow = ["algo.agent.critic_hidden_dim=2048", "algo.agent.num_updates=64", "algo.agent.learning_starts=1"]
    grace = ["algo.trainer.stop_grace_s=1.5"] if cause == "grace period" else []
    run = _Run(tmp_path, [*TINY, *ASYNC, *slow, *grace, LONG, "run_name=r"])
    learner_log = RunLayout(tmp_path / "runs" / "r").log("learner0")
    try:
        # The learner's first chunk has ended (its second starts at once): signalled now, it is seconds
        # from its final checkpoint, and the run is not kept waiting for its first progress line.
        _wait_for_log(learner_log, lambda text: "first update chunk" in text)
        run.proc.send_signal(signal.SIGTERM)
        run.wait_for("stop requested (SIGTERM)", timeout_s=30)
        if cause == "second SIGTERM":
            time.sleep(1.2)  # past the debounce: a second signal, not uv's forwarded copy of the first
            run.proc.send_signal(signal.SIGTERM)
        second = time.monotonic()
        code, out, err = run.finish(timeout_s=60)
    finally:
        run.close()
    stopped_s = time.monotonic() - second
    assert code == 128 + signal.SIGTERM, out + err
    expected = "second SIGTERM" if cause == "second SIGTERM" else "took longer than 1.5 s"
    assert "stopped at once (" in err and expected in err, err
    assert "no final checkpoint" in err
    assert stopped_s < 15, stopped_s
    run_dir = tmp_path / "runs" / "r"
    _assert_nothing_left(run_dir, err)
    assert "stopped at once" in RunLayout(run_dir).parent_log.read_text()


_SIGTERM_AT_EXIT = """
import atexit, os, signal, sys, time
sys.argv = ["trainer", "--version"]
atexit.register(lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(30)))  # as the process exits
{call}
"""


_CONSOLE_SCRIPT = """
from importlib.metadata import entry_points
entry_points(group="console_scripts")["trainer"].load()()
"""


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (_CONSOLE_SCRIPT, 0),
        (f"import runpy\nrunpy.run_path({str(APP_DIR)!r}, run_name='__main__')", 0),
        ("import runpy\nrunpy.run_module('fastsac_trainer', run_name='__main__')", 0),
        ("from fastsac_trainer.cli import main\nmain()", -signal.SIGTERM),
    ],
    ids=["console script", "apps/trainer", "python -m fastsac_trainer", "main() from a script"],
)
def test_only_the_command_itself_ends_on_a_signal_after_its_outcome(call: str, code: int) -> None:
    """A SIGTERM at exit ends the command's entry points with its code (0); a script's main() call is not."""
    script = _SIGTERM_AT_EXIT.format(call=call)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.startswith("trainer (fastsac-trainer) "), done.stdout + done.stderr
    assert (done.returncode, done.stderr) == (code, ""), done.stderr
