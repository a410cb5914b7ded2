import os
import signal
import time

import shmtx_workers as w
from _runner import SPAWN

import shm_transport._segment as seg
from shm_transport import HostRing, list_segments


def test_sigkilled_producer_leaves_no_corrupt_slot_and_no_segment() -> None:
    """SIGKILL the producer mid-run: the consumer reads only whole slots, and /dev/shm is clean after."""
    ring = HostRing.create(w.kill_layout(), capacity=16)
    name = ring.name
    stop = SPAWN.Event()
    progress = SPAWN.Value("q", 0, lock=False)
    out = SPAWN.Queue()
    producer = SPAWN.Process(target=w.endless_producer, args=(ring.handle,), daemon=True)
    consumer = SPAWN.Process(target=w.checking_consumer, args=(ring.handle, stop, progress, out), daemon=True)
    try:
        producer.start()
        consumer.start()
        deadline = time.monotonic() + 120.0
        while progress.value < 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert progress.value >= 300, "the producer/consumer pair made no progress"
        os.kill(producer.pid, signal.SIGKILL)  # type: ignore[arg-type]
        producer.join(timeout=10.0)
        assert producer.exitcode == -signal.SIGKILL
        stop.set()
        received, bad = out.get(timeout=30.0)
        consumer.join(timeout=10.0)
        assert consumer.exitcode == 0
        assert bad == 0
        assert received == ring.write_count == ring.read_count  # every published slot, nothing more
    finally:
        for proc in (producer, consumer):
            if proc.is_alive():
                proc.kill()
            proc.join(timeout=5.0)
        out.close()
        out.join_thread()
        ring.close()
        ring.unlink()
    assert not (seg.SHM_DIR / name).exists()
    assert all(info.name != name for info in list_segments())
