"""A collector's policy call by batch size, on the CPU and on the GPU (`collector_inference_device`).

Times what a collector does per step to act: its ``InferencePolicy`` (the task's actor and observation
normaliser, built as ``fastsac_async.collector.process`` builds it: autocast on CUDA unless
``--no-amp``) called on a batch of random observations held on the host, the actions brought back to
the host as numpy. One process, ``--threads`` torch threads (a collector has one), each batch size on
each device, the mean of ``--calls`` calls after ``--warmup``.

    uv run --frozen python benchmarks/collector_policy.py                        # humanoid, cpu (+ cuda)
    uv run --frozen python benchmarks/collector_policy.py --task ant --batches 16 32 64 128
    taskset -c 2 python3 benchmarks/collector_policy.py --devices cpu cuda       # on the GPU host

A collector's own figure in a run is ``perf/collector_inference_ms`` (its policy and the host copy, as
here, beside 13 other collectors and the learner on the same GPU).
"""

from __future__ import annotations

import argparse
import time

import torch
from _harness import add_output_args, machine, report

from fastsac_core import InferencePolicy
from fastsac_trainer.tasks import TaskError, get_task, probe_dims


def _ms_per_call(policy: InferencePolicy, obs: torch.Tensor, calls: int, warmup: int) -> float:
    for _ in range(warmup):
        policy(obs).cpu().numpy()
    start = time.perf_counter()
    for _ in range(calls):
        policy(obs).cpu().numpy()  # the collector's own line: actions back on the host
    return (time.perf_counter() - start) / calls * 1e3


def main() -> None:
    """Parse the arguments, time every batch size on every device, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="humanoid", help="a built-in task with a gymnasium env")
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 32, 64, 128, 256, 448])
    parser.add_argument("--devices", nargs="+", default=None, help="default: cpu, and cuda if present")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--no-amp", action="store_true", help="no bf16 autocast on CUDA (collector_amp off)")
    add_output_args(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    try:
        task = get_task(args.task)
        factory = task.env_factory()
    except TaskError as exc:
        parser.error(str(exc))
    devices = args.devices or ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
    print(machine(f"torch threads {torch.get_num_threads()}"))
    dims = probe_dims(factory)  # as a launch reads them
    cfg = task.agent_config()
    rows = []
    for device in devices:
        cuda = torch.device(device).type == "cuda"
        policy = InferencePolicy(dims, cfg, device=device, amp=cuda and not args.no_amp)
        for batch in args.batches:
            obs = torch.randn(batch, dims.obs_dim)
            rows.append({
                "device": device, "envs": batch,
                "ms per call": _ms_per_call(policy, obs, args.calls, args.warmup),
            })  # fmt: skip
    report(f"{task.env_id} policy call (actor {cfg.actor_hidden_dim}, {args.calls} calls)", rows, args.json)


if __name__ == "__main__":
    main()
