"""Console rendering (plain and rich, into fixed-width string consoles), fan-out, Ctrl+C and keys."""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import signal
import sys
import termios
import time
from pathlib import Path

import pytest
from rich.console import Console

from fastsac_trainer.console import (
    ConsoleLogHandler,
    FanOut,
    PlainConsole,
    RichConsole,
    StopRequest,
    SystemSampler,
    open_console,
    render_system,
    snapshot_line,
)
from fastsac_trainer.console._keys import KeyReader
from fastsac_trainer.reporting import Snapshot
from fastsac_trainer.testing import RecordingReporter


def _snapshot(iteration: int = 50, **scalars: float) -> Snapshot:
    values = {
        "perf/env_steps_per_s": 12345.0,
        "perf/updates_per_s": 96.0,
        "perf/learn_pct": 87.5,
        "perf/collector_wait_pct": 12.5,
        "async/utd": 8.0,
        "async/policy_lag": 3.0,
        "async/ring_fill": 12.0,
        "rollout/mean_return": 4321.0,
        "rollout/mean_ep_len": 812.0,
        "train/qf_loss": 1.25,
        "train/alpha": 0.0123,
    }
    values.update(scalars)
    return Snapshot(
        iteration=iteration,
        env_steps=iteration * 64,
        total_env_steps=1000 * 64,
        elapsed_s=iteration * 0.5,
        scalars=values,
        timing={
            "collector0": {"env_step": 4.0, "env_step.physics": 3.0, "push": 0.25, "wait": 1.0},
            "learner0": {"drain": 0.5, "update": 9.5},
        },
    )


def _render(console: RichConsole, tab: int) -> str:
    console.tab = tab
    out = Console(file=io.StringIO(), width=120, color_system=None)
    out.print(console.renderable())
    text = out.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(text, str)
    return text


def test_plain_line_holds_progress_returns_and_rates() -> None:
    """A plain line shows iteration, progress %, return, env steps/s, UTD, learn %, wait %, lag and ETA."""
    line = snapshot_line(_snapshot(50), _snapshot(10))
    parts = ("it 50 (5.0%)", "return 4.321k", "env/s 12.35k", "utd 8.000", "learn% 87.50", "wait% 12.50")
    for part in (*parts, "lag 3 ", "ring 12 "):  # counts print whole
        assert part in line
    # 40 iterations took 20 s; 950 iterations remain -> 475 s.
    assert "~left 7m55s" in line


def test_the_time_left_never_exceeds_the_launchs_time_limit() -> None:
    """With 20 s of time_limit_s left the estimate says 20 s, not the 475 s the budget would take."""
    limited = _snapshot(50)
    limited.time_left_s = 20.0
    assert "~left 20s" in snapshot_line(limited, _snapshot(10))


def test_counts_print_as_whole_numbers_in_both_consoles() -> None:
    """Weight version, policy lag and ring fill are counts: `weight ver 252`, never `252.0`."""
    snap = _snapshot(50, **{"async/weight_version": 252.0})
    console = RichConsole(Console(file=io.StringIO()), "t", keys=False, live=False)
    console.report(snap)
    text = _render(console, 0)
    console.close()
    assert "252.0" not in text and "252" in text
    assert " 3.000" not in snapshot_line(snap)


def test_the_boot_panel_counts_the_seconds_of_boot() -> None:
    """While workers start, the boot panel shows how long the boot has taken so far."""
    console = RichConsole(Console(file=io.StringIO()), "t", keys=False, live=False)
    console.worker_state("learner0", "booting")
    console.board.started -= 12.0
    text = _render(console, 0)
    console.close()
    assert "0/1 workers ready · 12s" in text


def test_plain_console_writes_boot_checkpoint_and_rate_limits_lines() -> None:
    """Boot states and checkpoints always print; snapshots are rate limited but the last one is kept."""
    stream = io.StringIO()
    console = PlainConsole(stream, "pendulum/fastsac", min_interval_s=3600)
    console.worker_state("learner0", "ready")
    console.report(_snapshot(10))
    console.report(_snapshot(20))
    console.checkpoint_saved(Path("runs/x/checkpoints/model_0000020.pt"))
    console.close()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "boot: learner0 ready (1/1 ready)"
    assert lines[1].startswith("[pendulum/fastsac] it 10 ")
    assert lines[2] == "✓ saved checkpoint runs/x/checkpoints/model_0000020.pt"
    assert lines[3].startswith("[pendulum/fastsac] it 20 ")
    assert len(lines) == 4


def test_a_plain_line_shows_only_fields_measured_since_the_previous_line() -> None:
    """Stale scalars never print (Note [fresh fields]); a field measured in a snapshot without a line does."""
    stream = io.StringIO()
    console = PlainConsole(stream, "t", min_interval_s=3600)
    console.report(_snapshot(10))
    not_collected = {"rollout/mean_return", "rollout/mean_ep_len", "train/alpha"}
    between = dataclasses.replace(_snapshot(20, **{"train/qf_loss": 2.5}), stale=frozenset(not_collected))
    last = dataclasses.replace(_snapshot(30), stale=frozenset({*not_collected, "train/qf_loss"}))
    console.report(between)  # held back: no line of its own
    console.report(last)
    console.close()
    first_line, line = stream.getvalue().splitlines()
    assert "return 4.321k" in first_line and "alpha 0.012" in first_line
    assert line.startswith("[t] it 30 ")
    assert "return - | ep_len - |" in line, "stale since it 10: not repeated"
    assert "qf_loss 2.500" in line, "measured at it 20, since the previous line"
    assert "alpha" not in line and "qf_loss 1.250" not in line


def test_rich_boot_panel_lists_workers_and_failure() -> None:
    """The boot panel shows each worker's state, then the failure line with the error log path."""
    console = RichConsole(Console(file=io.StringIO()), "humanoid/fastsac", keys=False, live=False)
    console.worker_state("learner0", "ready")
    console.worker_state("collector0", "booting")
    text = _render(console, 0)
    assert "humanoid/fastsac · boot" in text
    assert "learner0" in text and "ready" in text and "collector0" in text and "booting" in text
    assert "1/2 workers ready" in text
    console.failed("collector0", "exit code 1", Path("runs/x/async_errors/collector0_error.log"))
    text = _render(console, 0)
    assert "boot failed: collector0: exit code 1; see runs/x/async_errors/collector0_error.log" in text
    assert console.failure is not None
    # A reason that already names the log is not followed by a second "see <path>".
    again = RichConsole(Console(file=io.StringIO()), "t", keys=False, live=False)
    again.failed("learner0", "exited with code 1; traceback in e.log", Path("e.log"))
    assert again.failure is not None
    assert again.failure.line() == "boot failed: learner0: exited with code 1; traceback in e.log"
    again.close()
    console.close()


def test_boot_count_shows_the_total_from_the_start() -> None:
    """Workers announced as waiting count in the total at once; released (running) workers stay ready."""
    names = ["learner0", *(f"collector{i}" for i in range(15))]
    stream = io.StringIO()
    plain = PlainConsole(stream, "t")
    rich = RichConsole(Console(file=io.StringIO()), "t", keys=False, live=False)
    for console in (plain, rich):
        for name in names:
            console.worker_state(name, "waiting")
        console.worker_state("learner0", "booting")
    assert "0/16 workers ready" in _render(rich, 0)
    for console in (plain, rich):
        for name in names:
            console.worker_state(name, "ready")
        console.worker_state("learner0", "running")
    assert "16/16 workers ready" in _render(rich, 0)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "boot: learner0 booting (0/16 ready)", "waiting states print no line"
    assert lines[-1] == "boot: learner0 running (16/16 ready)"
    rich.close()


def test_failure_after_training_started_is_not_a_boot_failure() -> None:
    """A failure the engine places after release is 'worker failed', even before the first report."""
    for console in (
        PlainConsole(io.StringIO(), "t"),
        RichConsole(Console(file=io.StringIO()), "t", keys=False, live=False),
    ):
        console.failed("collector1", "exited with code -9", None, during_boot=False)
        assert console.failure is not None
        assert console.failure.line() == "worker failed: collector1: exited with code -9"
        console.close()


def test_rich_training_tabs_render_overview_timing_system() -> None:
    """Keys 1/2/3 select Overview (rates, returns, losses), Timing (stage trees) and System (CPUs)."""
    console = RichConsole(Console(file=io.StringIO()), "humanoid/fastsac", keys=False, live=False)
    console.report(_snapshot(10))
    console.report(_snapshot(50))
    console.checkpoint_saved(Path("runs/x/checkpoints/model_0000050.pt"))
    overview = _render(console, 0)
    for part in (
        "Overview (keys 1/2/3)",
        "5.0%",
        "~left",
        "4.321k",
        "12.35k",
        "87.50%",
        "12.50%",
        "collector wait",
        "qf_loss",
        "ring fill",
    ):
        assert part in overview, part
    assert "✓ saved checkpoint runs/x/checkpoints/model_0000050.pt" in overview
    console._on_key("2")
    timing = _render(console, console.tab)
    assert "collector0" in timing and "learner0" in timing
    assert "physics" in timing and "update" in timing
    console._on_key("3")
    system = _render(console, console.tab)
    assert "cpu" in system and "RAM" in system
    console.close()


def test_timing_shares_are_of_the_group_total() -> None:
    """Each stage's share is its mean over the group's top-level total (nested stages included)."""
    console = RichConsole(Console(file=io.StringIO()), "t", keys=False, live=False)
    console.report(_snapshot(5))
    text = _render(console, 1)
    total = 4.0 + 0.25 + 1.0
    for stage_ms in (4.0, 3.0, 0.25, 1.0):
        assert f"{100 * stage_ms / total:5.1f}%" in text
    console.close()


def test_system_panel_without_gpu_says_so() -> None:
    """Without NVML GPUs the system tab renders CPUs and RAM and states that no GPU is visible."""
    sampler = SystemSampler()
    sample = sampler.sample()
    sampler.close()
    out = Console(file=io.StringIO(), width=100, color_system=None)
    out.print(render_system(sample))
    text = out.file.getvalue()  # type: ignore[attr-defined]
    assert f"cpu{sample.cpu_ids[0]}" in text
    if not sample.gpus:
        assert "no GPU visible" in text


def test_open_console_picks_plain_without_tty() -> None:
    """Mode auto gives the plain console on a non-TTY stream, rich when asked."""
    assert isinstance(open_console("auto", "t", io.StringIO()), PlainConsole)
    rich_console = open_console("rich", "t", io.StringIO())
    assert isinstance(rich_console, RichConsole)
    rich_console.close()


class _FailingClose(RecordingReporter):
    def close(self) -> None:
        super().close()
        raise RuntimeError("close failed")


def test_fan_out_forwards_and_closes_all_even_after_a_failure() -> None:
    """FanOut forwards every call to every reporter and closes all of them when one close fails."""
    first, second = _FailingClose(), RecordingReporter()
    fan = FanOut([first, second])
    snap = _snapshot(3)
    fan.report(snap)
    fan.checkpoint_saved(Path("a.pt"))
    with pytest.raises(RuntimeError, match="close failed"):
        fan.close()
    assert first.snapshots == second.snapshots == [snap]
    assert second.checkpoints == [Path("a.pt")]
    assert first.closed and second.closed


def test_the_evaluators_records_stay_off_the_console() -> None:
    """ConsoleLogHandler shows other loggers' records but none of the evaluator's (the run's log has them)."""
    out = io.StringIO()
    handler = ConsoleLogHandler(PlainConsole(out, "t", min_interval_s=0.0))
    for name in ("fastsac_async.evaluator.loop", "fastsac_async.evaluator", "fastsac_trainer.reporting"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        try:
            logger.warning("from %s", name)
        finally:
            logger.removeHandler(handler)
    assert out.getvalue().splitlines() == [
        "WARNING fastsac_trainer.reporting: from fastsac_trainer.reporting"
    ]


def test_first_ctrl_c_requests_stop_second_aborts() -> None:
    """SIGINT once sets should_stop (and notifies); twice raises KeyboardInterrupt; handler restored."""
    notified: list[str] = []
    previous = signal.getsignal(signal.SIGINT)
    with StopRequest(on_first=notified.append, debounce_s=0.05) as stop:
        assert not stop()
        signal.raise_signal(signal.SIGINT)
        assert stop() and notified == ["SIGINT"]
        time.sleep(0.1)
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is previous


def test_a_duplicated_sigint_counts_as_one_press() -> None:
    """Two SIGINTs in quick succession (uv run forwarding the terminal's) only request a clean stop."""
    with StopRequest(debounce_s=5.0) as stop:
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
        assert stop()


def test_key_reader_sets_cbreak_and_restores_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a TTY stdin the reader turns echo/canonical mode off, delivers keys and restores the settings."""
    master, slave = os.openpty()
    try:
        with os.fdopen(os.dup(slave), "r") as tty_in:
            monkeypatch.setattr(sys, "stdin", tty_in)
            before = termios.tcgetattr(slave)
            got: list[str] = []
            reader = KeyReader(got.append)
            assert reader.start()
            during = termios.tcgetattr(slave)
            assert not during[3] & termios.ECHO and not during[3] & termios.ICANON
            os.write(master, b"2")
            deadline = time.monotonic() + 5.0
            while not got and time.monotonic() < deadline:
                time.sleep(0.01)
            reader.stop()
            assert got == ["2"]
            assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


def test_key_reader_does_nothing_without_a_tty(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a TTY stdin no thread starts and stop() is harmless."""
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    reader = KeyReader(lambda key: None)
    assert not reader.start()
    reader.stop()


def test_a_stop_line_written_inside_a_write_waits_for_it_instead_of_failing() -> None:
    """A stop line that comes mid-write (a buffered stream refuses reentry) is written after that line."""
    import io

    class Raw(io.RawIOBase):
        def __init__(self) -> None:
            self.data = b""
            self.console: PlainConsole | None = None

        def writable(self) -> bool:
            return True

        def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
            console, self.console = self.console, None
            if console is not None:  # as SIGHUP's handler does, inside the buffered writer's write
                console.stop_requested("SIGHUP")
            self.data += bytes(b)
            return len(b)

    raw = Raw()
    stream = io.TextIOWrapper(io.BufferedWriter(raw, buffer_size=1), write_through=True)
    console = PlainConsole(stream, "t", min_interval_s=3600)
    raw.console = console
    console.info("a line long enough to reach the raw stream")
    lines = raw.data.decode().splitlines()
    assert lines[0] == "a line long enough to reach the raw stream"
    assert lines[1].startswith("stop requested (SIGHUP)")
