"""Stop signals (StopRequest) and console output that outlives its reader (GuardedStream), in-process."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from fastsac_trainer.console import STOP_SIGNALS, GuardedStream, PlainConsole, StopRequest


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_request_a_clean_stop_named_by_the_signal(sig: signal.Signals) -> None:
    """SIGTERM or SIGHUP once sets should_stop like Ctrl+C, names itself, and the handler is restored."""
    notified: list[str] = []
    previous = signal.getsignal(sig)
    with StopRequest(on_first=notified.append) as stop:
        signal.raise_signal(sig)
        assert stop() and not stop.aborted
        assert stop.reason == notified[0] == sig.name
    assert signal.getsignal(sig) is previous


def test_the_checkpoint_signal_stops_only_when_listed() -> None:
    """A checkpoint signal added to the stop signals (SIGUSR1) requests a clean stop named after it."""
    with StopRequest(signals=(*STOP_SIGNALS, signal.SIGUSR1)) as stop:
        signal.raise_signal(signal.SIGUSR1)
        assert stop() and stop.reason == "SIGUSR1"


def test_a_second_signal_aborts_and_a_polled_abort_raises_nothing() -> None:
    """Without raise_on_abort, a second signal (after the debounce) only sets `aborted`, naming it."""
    with StopRequest(debounce_s=0.05, raise_on_abort=False) as stop:
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)  # within the debounce: the same signal
        assert stop() and not stop.aborted
        time.sleep(0.1)
        signal.raise_signal(signal.SIGHUP)
        assert stop.aborted and stop.abort_cause == "second SIGHUP" and stop.abort_signal == signal.SIGHUP


def test_the_grace_period_running_out_interrupts_a_blocked_main_thread() -> None:
    """With raise_on_abort, the grace period ends even a blocking call with KeyboardInterrupt, once."""
    threads = threading.active_count()
    stop = StopRequest(grace_s=0.2)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt), stop:
        signal.raise_signal(signal.SIGTERM)
        time.sleep(10.0)
    assert time.monotonic() - start < 5.0
    assert stop.aborted and stop.abort_signal == signal.SIGTERM
    assert stop.abort_cause == "the stop after SIGTERM took longer than 0.2 s"
    assert threading.active_count() == threads, "the grace timer outlived the context"


def test_a_polled_grace_period_sets_aborted_and_a_finished_stop_is_never_aborted() -> None:
    """Without raise_on_abort the grace period only sets `aborted`; leaving in time cancels it."""
    with StopRequest(grace_s=0.1, raise_on_abort=False) as stop:
        signal.raise_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5.0
        while not stop.aborted and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stop.aborted
    with StopRequest(grace_s=0.3) as quick:
        signal.raise_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert quick() and not quick.aborted


def test_a_closed_pipe_stops_the_output_without_an_error() -> None:
    """Writing to a pipe whose reader is gone drops the output, reports once, and never raises again."""
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    lost: list[str] = []
    with os.fdopen(write_fd, "w") as raw:
        out = GuardedStream(raw, "stdout", lost.append)
        console = PlainConsole(out, "t")
        console.info("first line")  # PlainConsole flushes every line: the pipe error surfaces here
        console.info("second line")
        out.flush()
        assert out.lost and not out.isatty()
        assert len(lost) == 1 and lost[0].startswith("stdout was closed (BrokenPipeError")
        raw.write("buffered for the final flush")  # the descriptor now points at /dev/null
    assert len(lost) == 1
