import queue
import threading
import time

import pytest
import shmtx_workers as w
import torch
from _runner import SPAWN

from shm_transport import (
    CudaIpcRing,
    CudaIpcUnavailable,
    CudaIpcWeightWriter,
    RingCursors,
    RingLayout,
    StartupHandshake,
    WeightChannel,
    cuda_ipc_available,
)

HAS_CUDA = torch.cuda.is_available()


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-CUDA fallback")
def test_without_cuda_construction_fails_with_the_reason() -> None:
    """Without CUDA the probe says why and create_consumer raises CudaIpcUnavailable (fall back to host)."""
    ok, reason = cuda_ipc_available("cuda:0")
    assert not ok and "is_available" in reason
    cursors = RingCursors.create(4)
    try:
        with pytest.raises(CudaIpcUnavailable, match="host transport"):
            CudaIpcRing.create_consumer(w.stress_layout(), 4, "cuda:0", cursors.handle)
    finally:
        cursors.close()
        cursors.unlink()


def test_expandable_segments_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """PYTORCH_CUDA_ALLOC_CONF with expandable segments makes the probe refuse, naming the variable."""
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128,expandable_segments:True")
    ok, reason = cuda_ipc_available(0)
    assert not ok and "PYTORCH_CUDA_ALLOC_CONF" in reason and "expandable" in reason


@pytest.mark.gpu
def test_cursor_waits_for_the_copy() -> None:
    """The write cursor does not move while the slot's H2D copy is still queued behind a long kernel."""
    layout = RingLayout.of(256, {"x": ((1024,), torch.float32), "n": ((), torch.uint8)})
    cursors = RingCursors.create(4)
    consumer = CudaIpcRing.create_consumer(layout, 4, "cuda:0", cursors.handle)
    producer = CudaIpcRing.attach_producer(consumer.producer_handle())
    try:
        assert producer._stream is not None
        with torch.cuda.stream(producer._stream):
            torch.cuda._sleep(2_000_000_000)  # ~1 s of GPU time ahead of the copy on the side stream
        assert producer.push({"x": torch.full((256, 1024), 3.0), "n": torch.ones(256, dtype=torch.uint8)})
        assert producer.issued_count == 1
        assert cursors.write == 0 and producer.write_count == 0
        assert consumer.read_span(4) == (0, {})
        producer.flush()
        assert cursors.write == 1
        count, views = consumer.read_span(4)
        assert count == 1 and bool((views["x"] == 3.0).all()) and bool((views["n"] == 1.0).all())
        consumer.commit_reads(1)
        torch.cuda.synchronize()
        assert consumer.read_count == 1
    finally:
        producer.close()
        consumer.close()
        cursors.close()
        cursors.unlink()


@pytest.mark.gpu
@pytest.mark.slow
def test_ipc_ring_across_processes_in_order_and_teardown() -> None:
    """A spawned producer's pushes arrive once, in order, over CUDA IPC; it detaches first."""
    n, capacity = 20_000, 32
    layout = w.stress_layout()
    cursors = RingCursors.create(capacity)
    consumer = CudaIpcRing.create_consumer(layout, capacity, "cuda:0", cursors.handle, debug=True)
    handshake = StartupHandshake(SPAWN, readers=["c0"], workers=["c0"], barrier=False)
    out = SPAWN.Queue()
    proc = SPAWN.Process(target=w.ipc_producer, args=(handshake, n, out))
    table = w.payload_table().cuda()
    seq_out = torch.empty(capacity, w.STRESS_ENVS, dtype=torch.int64, device="cuda")
    pay_out = torch.empty(capacity, w.STRESS_ENVS, w.STRESS_WIDTH, device="cuda")
    received = bad = 0
    try:
        proc.start()
        handshake.ship("c0", consumer.producer_handle())
        while received < n:
            count, views = consumer.read_span_blocking(capacity, timeout_s=60.0)
            assert count > 0, f"stalled after {received} slots"
            seq_out[:count].copy_(views["seq"])
            pay_out[:count].copy_(views["payload"])
            consumer.commit_reads(count)
            expected = torch.arange(received, received + count, device="cuda")
            ok = (seq_out[:count] == expected[:, None]).all(dim=1)
            ok &= (pay_out[:count] == table[expected % w.PAYLOAD_PERIOD]).flatten(1).all(dim=1)
            bad += int((~ok).sum())
            received += count
        assert out.get(timeout=60.0) == ("producer", n)
        proc.join(timeout=60.0)
        assert proc.exitcode == 0
        assert bad == 0 and received == n
        assert cursors.producer_pid == 0  # the producer detached before the consumer closes
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5.0)
        out.close()
        out.join_thread()
        handshake.close()
        consumer.close()
        cursors.close()
        cursors.unlink()


@pytest.mark.gpu
def test_ipc_weights_in_process_threads() -> None:
    """Device-slot seqlock: a writer thread publishing flat out never lets the reader load a torn snapshot."""
    from shm_transport import CudaIpcWeightReader

    channel = WeightChannel.create(1 << 16, w.WEIGHT_EXTRAS, host_slots=False)
    writer = CudaIpcWeightWriter(channel, "cuda:0")
    reader = CudaIpcWeightReader(writer.reader_handle())
    stop = threading.Event()
    errors: queue.Queue[str] = queue.Queue()

    def publish_loop() -> None:
        version = 0
        params = torch.empty(1 << 16, device="cuda")
        mean = torch.empty(5, device="cuda")
        count = torch.empty((), dtype=torch.float64, device="cuda")
        while not stop.is_set():
            version += 1
            params.fill_(version)
            mean.fill_(version)
            count.fill_(version)
            if writer.publish(params, {"mean": mean, "count": count}) != version:
                errors.put(f"version {version} mismatch")
            # Let the reader thread take the GIL: a writer thread that never releases it while seq is
            # even starves any reader thread (the trainer's writer and readers are separate processes).
            time.sleep(0)

    thread = threading.Thread(target=publish_loop, daemon=True)
    thread.start()
    params = torch.zeros(1 << 16, device="cuda")
    extras = {
        "mean": torch.zeros(5, device="cuda"),
        "count": torch.zeros((), dtype=torch.float64, device="cuda"),
    }
    loaded = last = 0
    try:
        while loaded < 5_000:
            version = reader.poll(params, extras)
            if version is None:
                continue
            assert version > last
            assert bool((params == version).all()) and bool((extras["mean"] == version).all())
            assert float(extras["count"]) == version
            last, loaded = version, loaded + 1
    finally:
        stop.set()
        thread.join(timeout=30.0)
        reader.close()
        writer.close()
        channel.close()
        channel.unlink()
    assert errors.empty()


@pytest.mark.gpu
@pytest.mark.slow
def test_ipc_weights_across_processes() -> None:
    """A spawned reader of device weight slots loads 5k consistent, increasing snapshots."""
    num_params = 1 << 16
    channel = WeightChannel.create(num_params, w.WEIGHT_EXTRAS, host_slots=False)
    writer = CudaIpcWeightWriter(channel, "cuda:0")
    handshake = StartupHandshake(SPAWN, readers=["c0"], workers=["c0"], barrier=False)
    stop = SPAWN.Event()
    out = SPAWN.Queue()
    proc = SPAWN.Process(target=w.ipc_weight_reader, args=(handshake, num_params, 5_000, stop, out))
    params = torch.empty(num_params, device="cuda")
    mean = torch.empty(5, device="cuda")
    count = torch.empty((), dtype=torch.float64, device="cuda")
    try:
        proc.start()
        handshake.ship("c0", writer.reader_handle())
        version = 0
        while not stop.is_set():
            version += 1
            params.fill_(version)
            mean.fill_(version)
            count.fill_(version)
            writer.publish(params, {"mean": mean, "count": count})
        _, (loaded, torn, regress) = out.get(timeout=60.0)
        proc.join(timeout=60.0)  # the reader exits before the writer's tensors are freed
        assert proc.exitcode == 0
        assert loaded == 5_000 and torn == 0 and regress == 0
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5.0)
        out.close()
        out.join_thread()
        handshake.close()
        writer.close()
        channel.close()
        channel.unlink()
