"""How fast a checkpoint's policy acts on small batches with several processes at once, by torch threads.

``trainer eval`` steps up to 32 envs per policy call; this times ``--calls`` calls on a batch of
``--batch`` random observations in ``--processes`` processes started together, each with torch's default
thread count and then with one thread, and prints each process's seconds.

    uv run --frozen python benchmarks/policy_threads.py runs/<run> [--processes 3] [--calls 1000] [--batch 10]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from _harness import machine


def _one(checkpoint: str, threads: int, calls: int, batch: int) -> None:
    """The worker: time ``calls`` policy calls and print the seconds."""
    import torch

    from fastsac_trainer.evaluate import load_policy
    from fastsac_trainer.run_dir import resolve_resume

    if threads > 0:
        torch.set_num_threads(threads)
    path, _ = resolve_resume(checkpoint, "checkpoint")
    policy, meta = load_policy(path)
    obs = torch.randn(batch, meta["dims"]["obs_dim"])
    for _ in range(50):
        policy(obs)
    start = time.perf_counter()
    for _ in range(calls):
        policy(obs)
    print(f"{torch.get_num_threads()} {time.perf_counter() - start:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="a checkpoint file or a run folder")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--worker-threads", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_threads is not None:
        _one(args.checkpoint, args.worker_threads, args.calls, args.batch)
        return
    print(machine())
    for threads, label in ((0, "torch's default threads"), (1, "one thread")):
        for processes in (1, args.processes):
            cmd = [sys.executable, str(Path(__file__)), args.checkpoint, f"--calls={args.calls}",
                   f"--batch={args.batch}", f"--worker-threads={threads}"]  # fmt: skip
            procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(processes)]
            outs = [p.communicate(timeout=600)[0].split() for p in procs]
            seconds = ", ".join(f"{float(o[1]):.2f} s" for o in outs)
            print(f"{label} ({outs[0][0]}), {processes} at once: {seconds} per {args.calls} calls")


if __name__ == "__main__":
    main()
