import threading
import time
from collections.abc import Iterator

import pytest
import shmtx_workers as w
from _runner import SPAWN

from shm_transport import HandshakeAborted, HostRing, StartupHandshake
from shm_transport.exceptions import HandshakeError, HandshakeTimeout


@pytest.fixture
def handshake() -> Iterator[StartupHandshake]:
    handshake = StartupHandshake(SPAWN, readers=["c0", "c1"], workers=["learner0", "c0", "c1"])
    yield handshake
    handshake.close()


def test_missing_worker_times_out_with_its_name(handshake: StartupHandshake) -> None:
    """wait_all_ready names every worker that did not report, and only those."""
    handshake.report_ready("learner0")
    handshake.report_ready("c0")
    seen: list[str] = []
    with pytest.raises(HandshakeTimeout, match=r"\['c1'\]") as error:
        handshake.wait_all_ready(timeout_s=0.3, on_ready=seen.append)
    assert "c0" not in str(error.value).split("within")[0]
    assert sorted(seen) == ["c0", "learner0"]


def test_stop_during_barrier_returns_promptly(handshake: StartupHandshake) -> None:
    """A stop request ends wait_all_ready and wait_released within 2 s, with HandshakeAborted."""
    for wait in (
        lambda stop: handshake.wait_all_ready(timeout_s=30.0, should_stop=stop.is_set),
        lambda stop: handshake.wait_released(timeout_s=30.0, should_stop=stop.is_set),
        lambda stop: handshake.receive("c0", timeout_s=30.0, should_stop=stop.is_set),
    ):
        stop = threading.Event()
        timer = threading.Timer(0.2, stop.set)
        timer.start()
        start = time.monotonic()
        with pytest.raises(HandshakeAborted):
            wait(stop)
        assert time.monotonic() - start < 0.2 + 2.0  # far below the 30 s timeout
        timer.join()


def test_exactly_one_message_per_reader(handshake: StartupHandshake) -> None:
    """A second ship to the same reader raises; the reader receives the first one, once."""
    handshake.ship("c0", {"ring": None})
    with pytest.raises(HandshakeError, match="already shipped"):
        handshake.ship("c0", {"ring": "again"})
    assert handshake.receive("c0", timeout_s=5.0) == {"ring": None}
    with pytest.raises(HandshakeError, match="already received"):
        handshake.receive("c0", timeout_s=5.0)
    with pytest.raises(HandshakeError, match="not part"):
        handshake.ship("c9", None)


def test_receive_timeout_blames_the_learner(handshake: StartupHandshake) -> None:
    """A reader that gets nothing times out naming itself and pointing at its learner."""
    with pytest.raises(HandshakeTimeout, match=r"'c1'.*learner probably failed"):
        handshake.receive("c1", timeout_s=0.1)


def test_barrier_false_returns_immediately() -> None:
    """With barrier=False, wait_released returns at once without a release."""
    handshake = StartupHandshake(SPAWN, readers=["c0"], workers=["c0"], barrier=False)
    try:
        start = time.monotonic()
        handshake.wait_released(timeout_s=30.0)
        assert time.monotonic() - start < 2.0  # far below the 30 s timeout
    finally:
        handshake.close()


def test_release_lets_workers_go_and_unknown_worker_is_refused(handshake: StartupHandshake) -> None:
    """After release, wait_released returns; report_ready refuses an unknown name."""
    handshake.release()
    handshake.wait_released(timeout_s=1.0)
    with pytest.raises(HandshakeError, match="not part"):
        handshake.report_ready("stranger")


@pytest.mark.slow
def test_across_spawned_collectors() -> None:
    """Each spawned collector gets its message, attaches its ring, reports ready, and runs after release."""
    rings = {name: HostRing.create(w.stress_layout(), capacity=4) for name in ("c0", "c1")}
    handshake = StartupHandshake(SPAWN, readers=["c0", "c1"], workers=["c0", "c1"])
    out = SPAWN.Queue()
    procs = [SPAWN.Process(target=w.handshake_collector, args=(handshake, name, out)) for name in rings]
    try:
        for proc in procs:
            proc.start()
        for name, ring in rings.items():
            handshake.ship(name, {"ring": ring.handle, "note": f"for {name}"})
        ready: list[str] = []
        handshake.wait_all_ready(timeout_s=120.0, on_ready=ready.append)
        assert sorted(ready) == ["c0", "c1"]
        for ring in rings.values():
            count, views = ring.read_span(4)
            assert count == 1 and bool((views["seq"] == 7).all())
        handshake.release()
        results = dict(out.get(timeout=60.0) for _ in procs)
        assert results == {"c0": "for c0", "c1": "for c1"}
        for proc in procs:
            proc.join(timeout=30.0)
            assert proc.exitcode == 0
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5.0)
        out.close()
        out.join_thread()
        handshake.close()
        for ring in rings.values():
            ring.close()
            ring.unlink()
