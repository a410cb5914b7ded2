"""Drain cost of the asynchronous learner: host ring(s) -> (pinned staging -> device) -> replay buffer.

Usage: uv run --frozen python benchmarks/async_drain.py [--device cuda] [--envs 256 2048] [--rings 1 4]

For each env count and ring count it fills the rings with ``--slots`` slots (a run of slots, as the
learner drains them), then times ``Ingestor.drain`` + the copy-stream event wait, and prints ms per
batch (one env step of all envs) and per run. Humanoid-v5 sizes by default (obs 348, act 17).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch

from fastsac_async import Ingestor
from fastsac_core import ReplayBuffer
from shm_transport import HostRing, transition_layout


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} CPUs, {gpu}, torch {torch.__version__}"


def bench(
    envs: int, rings: int, slots: int, repeats: int, device: str, obs: int, act: int
) -> tuple[float, float]:
    """Median ms per batch and per run of ``slots`` batches."""
    width = envs // rings
    layout = transition_layout(width, obs, obs, act)
    host = [HostRing.create(layout, slots) for _ in range(rings)]
    try:
        buffer = ReplayBuffer(envs, 256, obs, obs, act, device=device)
        ing = Ingestor(host, buffer, max_ingest_per_iter=slots)
        flag = torch.zeros(width, dtype=torch.bool)
        fields = {
            "obs": torch.randn(width, obs), "critic_obs": torch.randn(width, obs),
            "actions": torch.randn(width, act), "rewards": torch.randn(width),
            "dones": flag, "truncations": flag,
        }  # fmt: skip
        times = []
        for i in range(repeats + 2):
            for ring in host:
                for _ in range(slots):
                    assert ring.push(fields)
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
        for ring in host:
            ring.close()
            ring.unlink()


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
    args = parser.parse_args()
    print(
        f"machine: {_machine()}; device {args.device}; obs {args.obs}, act {args.act}, {args.slots}-slot runs"
    )
    print(f"{'envs':>6} {'rings':>5} {'ms/batch':>9} {'ms/run':>8}")
    for envs in args.envs:
        for rings in args.rings:
            per_batch, per_run = bench(envs, rings, args.slots, args.repeats, args.device, args.obs, args.act)
            print(f"{envs:>6} {rings:>5} {per_batch:>9.3f} {per_run:>8.3f}")


if __name__ == "__main__":
    main()
