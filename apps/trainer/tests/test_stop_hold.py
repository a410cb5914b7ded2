"""A replay write in progress holds a stop's grace period, up to its bound, in-process.

Note [a stop waits for the replay write] in fastsac_core._replay_file: the sync trainer's StopRequest
asks this process's writes; the async engine asks its learners' holds in the shared counters.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from fastsac_async.control import Control
from fastsac_core import ReplayBuffer, ReplaySaver, replay_write_hold, write_bound_s
from fastsac_trainer.console import StopRequest


def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Poll ``condition`` until true or ``timeout_s``; its last value."""
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def _buffer() -> ReplayBuffer:
    """A filled buffer of 64 envs x 256 steps of 64 floats (4 MiB of obs)."""
    buffer = ReplayBuffer(64, 256, 64, None, 2)
    buffer.extend_batch(
        {
            "obs": torch.randn(256, 64, 64),
            "actions": torch.randn(256, 64, 2),
            "rewards": torch.randn(256, 64),
            "terminated": torch.zeros(256, 64, dtype=torch.bool),
            "truncated": torch.zeros(256, 64, dtype=torch.bool),
        }
    )
    return buffer


def test_a_final_replay_write_outlasting_the_grace_period_is_not_cut(tmp_path: Path) -> None:
    """The grace clock stops while save_now writes: a write longer than grace_s ends, then it runs out."""
    buffer = _buffer()
    saver = ReplaySaver(tmp_path / "replay.pt", None)
    entered, release = threading.Event(), threading.Event()
    saved: list[object] = []

    def slow_extra() -> dict[str, object]:
        entered.set()  # inside save_now: the write holds the stop from here
        release.wait(10.0)
        return {}

    writer = threading.Thread(target=lambda: saved.append(saver.save_now(buffer, 3, slow_extra)))
    with StopRequest(grace_s=0.1, raise_on_abort=False, hold=replay_write_hold) as stop:
        writer.start()
        assert entered.wait(10.0)  # the hold is registered before the grace clock starts
        signal.raise_signal(signal.SIGTERM)
        hold = replay_write_hold()
        assert hold is not None and hold - time.monotonic() <= write_bound_s(buffer)
        time.sleep(0.5)  # five grace periods while the write is held
        assert not stop.aborted, "the grace period ran out during the replay write"
        release.set()
        writer.join(10.0)
        assert saved and saved[0] is not None and replay_write_hold() is None
        assert _until(lambda: stop.aborted), "the grace period never ran out after the write"
        assert stop.abort_cause is not None and "s of replay writes" in stop.abort_cause


def test_a_hold_past_its_bound_no_longer_holds_the_stop() -> None:
    """A write that outlives its bound (a hung disk) lets the grace period run out."""
    with StopRequest(grace_s=0.1, raise_on_abort=False, hold=lambda: time.monotonic() - 1.0) as stop:
        signal.raise_signal(signal.SIGTERM)
        assert _until(lambda: stop.aborted)


def test_a_learners_final_saves_hold_the_parents_abort_until_done_or_bound() -> None:
    """Control: a learner's stop hold counts while it is not done and its bound lies ahead."""
    control = Control(num_collectors=2, num_learners=2)
    assert not control.stop_held()
    control.hold_stop(1, time.monotonic() + 30.0)
    assert control.stop_held() and not control.failures(), "the hold is a field of its own"
    control.mark_learner_done(1)
    assert not control.stop_held()
    control.hold_stop(0, time.monotonic() - 0.001)
    assert not control.stop_held()


def test_a_second_signal_stops_at_once_while_a_learners_final_saves_hold_the_stop() -> None:
    """Only the grace period's abort waits for a learner's hold; a second signal's is due at once."""
    control = Control(num_collectors=1, num_learners=1)
    control.hold_stop(0, time.monotonic() + 600.0)
    with StopRequest(grace_s=0.01, debounce_s=0.0, raise_on_abort=False) as stop:
        signal.raise_signal(signal.SIGTERM)
        assert _until(lambda: stop.aborted), "the grace period never ran out"
        assert not stop.forced and not control.abort_due(aborted=stop.aborted, forced=stop.forced)
        signal.raise_signal(signal.SIGTERM)  # the user's second signal, while the hold lasts
        assert stop.forced and stop.abort_cause == "second SIGTERM"
        assert control.abort_due(aborted=stop.aborted, forced=stop.forced), (
            "the hold swallowed the second signal"
        )
    control.mark_learner_done(0)
    assert control.abort_due(aborted=True, forced=False), "the grace period's abort is due once the hold ends"
