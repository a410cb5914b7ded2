import pytest
import shmtx_workers as w
from _runner import run_bodies

from shm_transport import HostRing


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "n"), [("process", 1_000_000), ("thread", 1_000_000)])
def test_every_slot_arrives_once_in_order(mode: str, n: int) -> None:
    """A million pushes with random pauses on both sides arrive exactly once, in order, uncorrupted."""
    ring = HostRing.create(w.stress_layout(), capacity=64)
    try:
        results = run_bodies(
            [(w.ring_producer, (ring.handle, n, 1)), (w.ring_consumer, (ring.handle, n, 2))],
            mode=mode,
            timeout_s=240.0,
        )
        assert results["producer"] == n
        received, bad, first_bad = results["consumer"]
        assert (received, bad) == (n, 0), first_bad
        assert ring.write_count == ring.read_count == n
    finally:
        ring.close()
        ring.unlink()
