"""Drain cost of the asynchronous learner: ring(s) -> replay buffer, through the learner's ``Ingestor``.

Usage: uv run --frozen python benchmarks/async_drain.py [--device cuda] [--envs 256 2048] [--rings 1 4]
       [--transport host|ipc|both] [--ingest generations|ragged|both]

``host``: shared-memory rings, drained through pinned staging and one H2D per field (or straight into a
CPU replay). ``ipc``: CUDA-IPC rings (slots already on the learner's GPU), drained device to device.

For each env count and ring count it fills the rings with ``--slots`` slots (a run of slots, as the
learner drains them), then times ``Ingestor.drain`` + the copy-stream event wait, and prints ms per
batch (one env step of all envs) and per run, for generation ingest (the rings' slots assembled into
whole env steps) and ragged ingest (each ring's slots into its own env block). Humanoid-v5 sizes by
default (obs 348, act 17, the critic observing obs as for every gymnasium task; ``--own-critic-obs``
adds a 348-wide critic field).
"""

from __future__ import annotations

import argparse
import time

import torch
from _harness import machine

from fastsac_async.learner.ingest import Ingestor
from fastsac_core import ReplayBuffer, transition_fields
from shm_transport import CudaIpcRing, HostRing, RingCursors, RingLayout


def bench(
    envs: int, rings: int, slots: int, repeats: int, device: str, obs: int, critic: int | None, act: int,
    transport: str, ragged: bool,
) -> tuple[float, float]:  # fmt: skip
    """Median ms per batch and per run of ``slots`` batches (``critic=None``: the critic observes obs)."""
    width = envs // rings
    layout = RingLayout.of(width, transition_fields(obs, critic, act))
    cursors: list[RingCursors] = []
    consumers: list[CudaIpcRing] = []
    host: list[HostRing] = []
    producers: list[HostRing] | list[CudaIpcRing]
    if transport == "ipc":
        cursors = [RingCursors.create(slots) for _ in range(rings)]
        consumers = [CudaIpcRing.create_consumer(layout, slots, device, c.handle) for c in cursors]
        producers = [CudaIpcRing.attach_producer(c.producer_handle()) for c in consumers]
    else:
        host = [HostRing.create(layout, slots) for _ in range(rings)]
        producers = host
    try:
        blocks = [width] * rings if ragged else None
        buffer = ReplayBuffer(envs, 256, obs, critic, act, device=device, blocks=blocks)
        ing = Ingestor(consumers or host, buffer, max_ingest_per_iter=slots, ragged=ragged)  # type: ignore[arg-type]
        flag = torch.zeros(width, dtype=torch.bool)
        fields = {
            "obs": torch.randn(width, obs), "actions": torch.randn(width, act), "rewards": torch.randn(width),
            "terminated": flag, "truncated": flag,
        }  # fmt: skip
        if critic is not None:
            fields["critic_obs"] = torch.randn(width, critic)
        times = []
        for i in range(repeats + 2):
            for ring in producers:
                for _ in range(slots):
                    assert ring.push(fields)
                ring.flush()  # a CUDA-IPC producer's H2D pushes are not part of the drain (host: no-op)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            got = ing.drain()
            ing.wait_before_sampling()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
            assert got == slots
            if i >= 2:
                times.append(elapsed)
        times.sort()
        run_ms = 1e3 * times[len(times) // 2]
        return run_ms / slots, run_ms
    finally:
        for ring in producers:
            ring.close()  # CUDA-IPC: producer first (Note [CUDA-IPC teardown order])
        for ring in host:
            ring.unlink()
        for consumer, cursor in zip(consumers, cursors, strict=True):
            consumer.close()
            cursor.close()
            cursor.unlink()


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--envs", type=int, nargs="+", default=[256, 2048])
    parser.add_argument("--rings", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--obs", type=int, default=348)
    parser.add_argument("--act", type=int, default=17)
    parser.add_argument("--transport", choices=["host", "ipc", "both"], default="both")
    parser.add_argument("--ingest", choices=["generations", "ragged", "both"], default="both")
    parser.add_argument(
        "--own-critic-obs", action="store_true",
        help="slots also carry a critic observation of obs width (as before critic_obs_is_obs)",
    )  # fmt: skip
    args = parser.parse_args()
    transports = ["host", "ipc"] if args.transport == "both" else [args.transport]
    if not args.device.startswith("cuda"):
        transports = ["host"]
    critic = args.obs if args.own_critic_obs else None
    print(
        f"{machine()}; device {args.device}; obs {args.obs}, critic obs "
        f"{critic or 'shared'}, act {args.act}, {args.slots}-slot runs"
    )
    modes = ["generations", "ragged"] if args.ingest == "both" else [args.ingest]
    head = ("transport", 9), ("ingest", 11), ("envs", 6), ("rings", 5), ("ms/batch", 9), ("ms/run", 8)
    head += (("MB/run", 7),)
    print(" ".join(f"{name:>{width}}" for name, width in head))
    for transport in transports:
        for mode in modes:
            for envs in args.envs:
                for rings in args.rings:
                    per_batch, per_run = bench(
                        envs, rings, args.slots, args.repeats, args.device, args.obs, critic, args.act,
                        transport, mode == "ragged",
                    )  # fmt: skip
                    mb = (
                        args.slots
                        * RingLayout.of(envs, transition_fields(args.obs, critic, args.act)).slot_nbytes
                        / 1e6
                    )
                    print(
                        f"{transport:>9} {mode:>11} {envs:>6} {rings:>5} {per_batch:>9.3f} {per_run:>8.3f} "
                        f"{mb:>7.1f}"
                    )


if __name__ == "__main__":
    main()
