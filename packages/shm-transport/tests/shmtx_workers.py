"""Process/thread bodies for the shm-transport tests (importable by spawned children)."""

from __future__ import annotations

import random
import time
from typing import Any

import torch

from shm_transport import (
    FieldSpec,
    HostRing,
    HostRingHandle,
    HostWeightReader,
    HostWeightWriter,
    RingLayout,
    WeightChannel,
    WeightChannelHandle,
)

STRESS_ENVS = 4
STRESS_WIDTH = 3


def stress_layout() -> RingLayout:
    return RingLayout.of(STRESS_ENVS, {"seq": ((), torch.int64), "payload": ((STRESS_WIDTH,), torch.float32)})


PAYLOAD_PERIOD = 1024


def payload_table() -> torch.Tensor:
    """Payload of slot i is row ``i % PAYLOAD_PERIOD``: distinct per env and per slot (exact floats)."""
    cells = STRESS_ENVS * STRESS_WIDTH
    table = torch.arange(PAYLOAD_PERIOD * cells, dtype=torch.float32)
    return table.view(PAYLOAD_PERIOD, STRESS_ENVS, STRESS_WIDTH)


def ring_producer(handle: HostRingHandle, n: int, seed: int, out: Any) -> None:
    """Push slots 0..n-1 (seq in every env, payload from ``payload_table``), pausing at random."""
    torch.set_num_threads(1)
    rng = random.Random(seed)
    ring = HostRing.attach(handle)
    seq = torch.empty(STRESS_ENVS, dtype=torch.int64)
    rows = list(payload_table())
    fields = {"seq": seq, "payload": rows[0]}
    pushed = 0
    try:
        for i in range(n):
            seq.fill_(i)
            fields["payload"] = rows[i % PAYLOAD_PERIOD]
            if not ring.push_blocking(fields, timeout_s=30.0):
                break
            pushed += 1
            if rng.random() < 2e-5:
                time.sleep(rng.random() * 2e-3)
    finally:
        ring.close()
        out.put(("producer", pushed))


def ring_consumer(handle: HostRingHandle, n: int, seed: int, out: Any) -> None:
    """Drain n slots in random-size spans; count slots that arrive out of order or corrupt."""
    torch.set_num_threads(1)
    rng = random.Random(seed)
    ring = HostRing.attach(handle)
    table = payload_table()
    seq_out = torch.empty(handle.capacity, STRESS_ENVS, dtype=torch.int64)
    payload_out = torch.empty(handle.capacity, STRESS_ENVS, STRESS_WIDTH)
    received = bad = 0
    first_bad: str | None = None
    try:
        while received < n:
            count, views = ring.read_span_blocking(rng.randint(1, handle.capacity), timeout_s=30.0)
            if count == 0:
                break
            seq_out[:count].copy_(views["seq"])
            payload_out[:count].copy_(views["payload"])
            ring.commit_reads(count)
            expected = torch.arange(received, received + count, dtype=torch.int64)
            seq_ok = (seq_out[:count] == expected[:, None]).all(dim=1)
            pay_ok = (payload_out[:count] == table[expected % PAYLOAD_PERIOD]).flatten(1).all(dim=1)
            ok = seq_ok & pay_ok
            if not bool(ok.all()):
                bad += int((~ok).sum())
                if first_bad is None:
                    idx = int((~ok).nonzero()[0])
                    first_bad = f"slot {received + idx}: seq {seq_out[idx].tolist()}"
            received += count
            if rng.random() < 1e-3:
                time.sleep(rng.random() * 2e-3)
    finally:
        ring.close()
        out.put(("consumer", (received, bad, first_bad)))


KILL_ENVS = 32
KILL_WIDTH = 512


def kill_layout() -> RingLayout:
    """Slots of 64 KiB, so a SIGKILL often lands in the middle of a copy."""
    return RingLayout.of(KILL_ENVS, {"seq": ((), torch.int64), "data": ((KILL_WIDTH,), torch.float32)})


def endless_producer(handle: HostRingHandle) -> None:
    """Push slots whose every element equals the slot's sequence number, until killed."""
    torch.set_num_threads(1)
    ring = HostRing.attach(handle)
    seq = torch.empty(KILL_ENVS, dtype=torch.int64)
    data = torch.empty(KILL_ENVS, KILL_WIDTH)
    i = 0
    while True:
        seq.fill_(i)
        data.fill_(float(i))
        if ring.push_blocking({"seq": seq, "data": data}, timeout_s=60.0):
            i += 1


def checking_consumer(handle: HostRingHandle, stop: Any, progress: Any, out: Any) -> None:
    """Read until ``stop`` is set and the ring is empty; count slots that are not all one value."""
    torch.set_num_threads(1)
    ring = HostRing.attach(handle)
    received = bad = 0
    try:
        while True:
            count, views = ring.read_span(handle.capacity)
            if count == 0:
                if stop.is_set() and ring.size() == 0:
                    break
                time.sleep(1e-4)
                continue
            seq = views["seq"].clone()
            data = views["data"].clone()
            ring.commit_reads(count)
            expected = torch.arange(received, received + count, dtype=torch.int64)
            values = expected.to(torch.float32)[:, None, None]
            ok = (seq == expected[:, None]).all() and (data == values).all()
            bad += 0 if bool(ok) else count
            received += count
            progress.value = received
    finally:
        ring.close()
        out.put((received, bad))


WEIGHT_EXTRAS = {"mean": FieldSpec((5,), torch.float32), "count": FieldSpec((), torch.float64)}


def weight_writer_loop(handle: WeightChannelHandle, num_params: int, stop: Any, out: Any) -> None:
    """Publish versions 1, 2, ... as fast as possible, every element equal to the version."""
    torch.set_num_threads(1)
    channel = WeightChannel.attach(handle)
    writer = HostWeightWriter(channel)
    params = torch.empty(num_params)
    mean = torch.empty(5)
    count = torch.empty((), dtype=torch.float64)
    # numpy views fill without releasing the GIL: in thread mode, only the channel's copies switch threads.
    fills = (params.numpy(), mean.numpy(), count.numpy())
    published = 0
    wrong_version = 0
    try:
        while not stop.is_set():
            version = published + 1
            for array in fills:
                array.fill(version)
            if writer.publish(params, {"mean": mean, "count": count}) != version:
                wrong_version += 1
            published = version
            time.sleep(0)  # a GIL release between writes (thread mode): a yield, not a wait
    finally:
        writer.close()
        channel.close()
        out.put(("writer", (published, wrong_version)))


def weight_reader_loop(
    handle: WeightChannelHandle, num_params: int, loads: int, timeout_s: float, out: Any
) -> None:
    """Poll until ``loads`` snapshots were loaded; count inconsistent ones and non-increasing versions."""
    torch.set_num_threads(1)
    channel = WeightChannel.attach(handle)
    reader = HostWeightReader(channel)
    params = torch.zeros(num_params)
    extras = {"mean": torch.zeros(5), "count": torch.zeros((), dtype=torch.float64)}
    checks = (params.numpy(), extras["mean"].numpy(), extras["count"].numpy())
    loaded = torn = regress = 0
    last = 0
    deadline = time.monotonic() + timeout_s
    try:
        while loaded < loads and time.monotonic() < deadline:
            version = reader.poll(params, extras)
            if version is None:
                time.sleep(0)  # let a writer thread (GIL) finish its write; the writer never waits
                continue
            consistent = all(bool((array == version).all()) for array in checks)
            torn += 0 if consistent else 1
            regress += 0 if version > last else 1
            last = version
            loaded += 1
    finally:
        retries = reader.torn_retries
        reader.close()
        channel.close()
        out.put(("reader", (loaded, torn, regress, retries)))


def weight_stopping_reader(
    handle: WeightChannelHandle, num_params: int, loads: int, timeout_s: float, stop: Any, out: Any
) -> None:
    """``weight_reader_loop``, then tell the writer to stop."""
    try:
        weight_reader_loop(handle, num_params, loads, timeout_s, out)
    finally:
        stop.set()


def handshake_collector(handshake: Any, name: str, out: Any) -> None:
    """Receive the startup message, attach the ring in it, push one slot, report ready, wait release."""
    payload = handshake.receive(name, timeout_s=60.0)
    ring = HostRing.attach(payload["ring"])
    try:
        ring.push({"seq": torch.full((STRESS_ENVS,), 7), "payload": torch.zeros(STRESS_ENVS, STRESS_WIDTH)})
        handshake.report_ready(name)
        handshake.wait_released(timeout_s=60.0)
    finally:
        ring.close()
        handshake.close()
        out.put((name, payload["note"]))


def ipc_producer(handshake: Any, n: int, out: Any) -> None:
    """CUDA-IPC producer: receive the ring handle, push n slots with sequence numbers, close first."""
    from shm_transport import CudaIpcRing

    handle = handshake.receive("c0", timeout_s=120.0)
    ring = CudaIpcRing.attach_producer(handle)
    rows = list(payload_table())
    seq = torch.empty(STRESS_ENVS, dtype=torch.int64)
    pushed = 0
    try:
        for i in range(n):
            seq.fill_(i)
            if not ring.push_blocking({"seq": seq, "payload": rows[i % PAYLOAD_PERIOD]}, timeout_s=60.0):
                break
            pushed += 1
    finally:
        ring.close()  # producer first: Note [CUDA-IPC teardown order]
        handshake.close()
        out.put(("producer", pushed))


def ipc_weight_reader(handshake: Any, num_params: int, loads: int, stop: Any, out: Any) -> None:
    """CUDA-IPC weight reader: load until ``loads`` snapshots; count inconsistent ones."""
    from shm_transport import CudaIpcWeightReader

    reader = CudaIpcWeightReader(handshake.receive("c0", timeout_s=120.0))
    device = torch.device("cuda", torch.cuda.current_device())
    params = torch.zeros(num_params, device=device)
    extras = {
        "mean": torch.zeros(5, device=device),
        "count": torch.zeros((), dtype=torch.float64, device=device),
    }
    loaded = torn = regress = last = 0
    deadline = time.monotonic() + 120.0
    try:
        while loaded < loads and time.monotonic() < deadline:
            version = reader.poll(params, extras)
            if version is None:
                continue
            ok = (params == version).all() & (extras["mean"] == version).all() & (extras["count"] == version)
            torn += 0 if bool(ok) else 1
            regress += 0 if version > last else 1
            last = version
            loaded += 1
    finally:
        reader.close()  # before the writer's process exits
        stop.set()
        handshake.close()
        out.put(("reader", (loaded, torn, regress)))
