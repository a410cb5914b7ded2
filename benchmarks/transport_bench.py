"""shm-transport benchmark: ring push+drain throughput, fixed push overhead, weight publish/poll latency.

Usage: ``uv run --frozen python benchmarks/transport_bench.py [--quick]``. Prints the machine, then a
table. Every process uses ``torch.set_num_threads(1)``; the plain copy is one ``Tensor.copy_`` of a
slot's bytes in one process, measured in the same run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from typing import Any

import torch
from _harness import machine

from shm_transport import (
    CudaIpcRing,
    CudaIpcWeightReader,
    CudaIpcWeightWriter,
    FieldSpec,
    HostRing,
    HostRingHandle,
    HostWeightReader,
    HostWeightWriter,
    RingCursors,
    RingLayout,
    WeightChannel,
    cuda_ipc_available,
)

FEATURES = 400
CAPACITY = 8
EXTRAS = {"mean": FieldSpec((400,), torch.float32), "std": FieldSpec((400,), torch.float32)}


def producer(handle: HostRingHandle, slots: int, ready: Any, go: Any) -> None:
    torch.set_num_threads(1)
    ring = HostRing.attach(handle)
    src = {"obs": torch.randn(handle.layout.num_envs, FEATURES)}
    ready.set()
    go.wait()
    for _ in range(slots):
        if not ring.push_blocking(src, timeout_s=300.0):
            raise RuntimeError("consumer stalled")
    ring.close()


def ring_throughput(num_envs: int, slots: int) -> tuple[float, float]:
    """(GB/s, µs per slot) of push in a child plus drain (copy out) in this process."""
    layout = RingLayout.of(num_envs, {"obs": ((FEATURES,), torch.float32)})
    ctx = multiprocessing.get_context("spawn")
    with HostRing.create(layout, CAPACITY) as ring:
        ready, go = ctx.Event(), ctx.Event()
        child = ctx.Process(target=producer, args=(ring.handle, slots, ready, go))
        child.start()
        dst = torch.empty(CAPACITY, num_envs, FEATURES)
        deadline = time.monotonic() + 300.0
        while not ready.wait(timeout=0.5):
            if not child.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the producer process did not start (exit code {child.exitcode})")
        go.set()
        received = 0
        start = 0.0
        while received < slots:
            count, views = ring.read_span_blocking(CAPACITY, timeout_s=300.0)
            if count == 0:
                raise RuntimeError("producer stalled")
            if received == 0:
                start = time.perf_counter()  # from the first slot: excludes the child's wake-up
            dst[:count].copy_(views["obs"])
            ring.commit_reads(count)
            received += count
        elapsed = time.perf_counter() - start
        child.join(timeout=60.0)
    moved = (slots - 1) * layout.slot_nbytes
    return moved / elapsed / 1e9, elapsed / (slots - 1) * 1e6


def plain_copy(num_envs: int, reps: int) -> tuple[float, float]:
    src = torch.randn(num_envs, FEATURES)
    dst = torch.empty_like(src)
    dst.copy_(src)
    start = time.perf_counter()
    for _ in range(reps):
        dst.copy_(src)
    elapsed = time.perf_counter() - start
    return reps * src.numel() * 4 / elapsed / 1e9, elapsed / reps * 1e6


def plain_copy_ring_footprint(num_envs: int, reps: int) -> tuple[float, float]:
    """Plain copy_ cycling over CAPACITY source/destination slots: the ring's memory footprint."""
    src = torch.randn(CAPACITY, num_envs, FEATURES)
    dst = torch.empty_like(src)
    dst.copy_(src)
    start = time.perf_counter()
    for i in range(reps):
        dst[i % CAPACITY].copy_(src[i % CAPACITY])
    elapsed = time.perf_counter() - start
    return reps * num_envs * FEATURES * 4 / elapsed / 1e9, elapsed / reps * 1e6


def tiny_push_overhead(reps: int) -> tuple[float, float]:
    """(µs per push, µs per push+commit) for a 4-env × 4-float slot, one process."""
    layout = RingLayout.of(4, {"obs": ((4,), torch.float32)})
    src = {"obs": torch.randn(4, 4)}
    with HostRing.create(layout, reps) as ring:
        start = time.perf_counter()
        for _ in range(reps):
            ring.push(src)
        push_us = (time.perf_counter() - start) / reps * 1e6
    with HostRing.create(layout, 64) as ring:
        start = time.perf_counter()
        for _ in range(reps):
            ring.push(src)
            ring.commit_reads(1)
        pair_us = (time.perf_counter() - start) / reps * 1e6
    return push_us, pair_us


def weight_latency(num_params: int, reps: int, device: str | None) -> tuple[float, float]:
    """Median (publish ms, poll ms) over ``reps`` publish/poll rounds (host or CUDA-IPC slots)."""
    src = torch.randn(num_params, device=device)
    extras = {name: torch.randn(spec.shape, device=device) for name, spec in EXTRAS.items()}
    dst = torch.empty(num_params, device=device)
    dst_extras = {name: torch.empty(spec.shape, device=device) for name, spec in EXTRAS.items()}
    channel = WeightChannel.create(num_params, EXTRAS, host_slots=device is None)
    writer: Any
    reader: Any
    if device is None:
        writer, reader = HostWeightWriter(channel), HostWeightReader(channel)
    else:
        writer = CudaIpcWeightWriter(channel, device)
        reader = CudaIpcWeightReader(writer.reader_handle())
    publish, poll = [], []
    try:
        for _ in range(reps + 1):
            start = time.perf_counter()
            writer.publish(src, extras)
            publish.append(time.perf_counter() - start)
            start = time.perf_counter()
            if reader.poll(dst, dst_extras) is None:
                raise RuntimeError("poll loaded nothing")
            if device is not None:
                torch.cuda.synchronize()
            poll.append(time.perf_counter() - start)
    finally:
        reader.close()
        writer.close()
        channel.close()
        channel.unlink()
    return statistics.median(publish[1:]) * 1e3, statistics.median(poll[1:]) * 1e3


def ipc_ring_cost(num_envs: int, slots: int) -> tuple[float, float]:
    """(µs per push, µs per drained slot) of a CUDA-IPC ring, both ends in this process."""
    layout = RingLayout.of(num_envs, {"obs": ((FEATURES,), torch.float32)})
    cursors = RingCursors.create(CAPACITY)
    consumer = CudaIpcRing.create_consumer(layout, CAPACITY, "cuda:0", cursors.handle)
    prod = CudaIpcRing.attach_producer(consumer.producer_handle())
    src = {"obs": torch.randn(num_envs, FEATURES)}
    dst = torch.empty(CAPACITY, num_envs, FEATURES, device="cuda")
    push_s = drain_s = 0.0
    try:
        for _ in range(slots // CAPACITY):
            start = time.perf_counter()
            for _ in range(CAPACITY):
                if not prod.push(src):
                    raise RuntimeError("CUDA-IPC push found the ring full after a full drain")
            prod.flush()
            push_s += time.perf_counter() - start
            start = time.perf_counter()
            count, views = consumer.read_span(CAPACITY)
            dst[:count].copy_(views["obs"])
            consumer.commit_reads(count)
            consumer.flush()  # wait for the D2D copy and publish the read cursor (it is lazy otherwise)
            drain_s += time.perf_counter() - start
    finally:
        prod.close()
        consumer.close()
        cursors.close()
        cursors.unlink()
    done = slots // CAPACITY * CAPACITY
    return push_s / done * 1e6, drain_s / done * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    torch.set_num_threads(1)
    scale = 1 if args.quick else 4
    print(machine())
    print(f"{'measurement':<58} {'value':>26}")
    for num_envs, slots in ((256, 500 * scale), (2048, 100 * scale)):
        ring_gbs, ring_us = ring_throughput(num_envs, slots)
        copy_gbs, copy_us = plain_copy(num_envs, slots)
        label = (
            f"host ring push+drain, {num_envs} envs x {FEATURES} f32 ({num_envs * FEATURES * 4 / 1e6:.2f} MB)"
        )
        print(f"{label:<58} {ring_gbs:>9.2f} GB/s {ring_us:>9.1f} us/slot")
        print(f"{'  plain copy_ of the same bytes':<58} {copy_gbs:>9.2f} GB/s {copy_us:>9.1f} us/slot")
        big_gbs, big_us = plain_copy_ring_footprint(num_envs, slots)
        label = "  plain copy_ cycling over 8 slots (ring footprint)"
        print(f"{label:<58} {big_gbs:>9.2f} GB/s {big_us:>9.1f} us/slot")
        label = "  ring / plain copy (same bytes; ring footprint)"
        print(f"{label:<58} {ring_gbs / copy_gbs:>9.0%} {ring_gbs / big_gbs:>9.0%}")
    push_us, pair_us = tiny_push_overhead(20_000 * scale)
    print(f"{'tiny slot (4 envs x 4 f32): push':<58} {push_us:>18.2f} us")
    print(f"{'tiny slot: push + commit_reads(1)':<58} {pair_us:>18.2f} us")
    for num_params in (1_000_000, 30_000_000):
        publish_ms, poll_ms = weight_latency(num_params, 3 * scale, None)
        label = f"host weights {num_params / 1e6:g}M f32: publish / poll"
        print(f"{label:<58} {publish_ms:>8.2f} / {poll_ms:>6.2f} ms")
    ok, reason = cuda_ipc_available(0)
    if not ok:
        print(f"CUDA-IPC rows skipped: {reason}")
        return
    for num_params in (1_000_000, 30_000_000):
        publish_ms, poll_ms = weight_latency(num_params, 3 * scale, "cuda:0")
        label = f"IPC weights {num_params / 1e6:g}M f32: publish / poll"
        print(f"{label:<58} {publish_ms:>8.2f} / {poll_ms:>6.2f} ms")
    for num_envs in (256, 2048):
        push_us, drain_us = ipc_ring_cost(num_envs, 200 * scale)
        label = f"CUDA-IPC ring {num_envs} envs x {FEATURES}: push / drain"
        print(f"{label:<58} {push_us:>8.1f} / {drain_us:>6.1f} us/slot")


if __name__ == "__main__":
    main()
