"""Learner update throughput: FastSAC critic updates per second, eager against compiled.

Humanoid-v5 dimensions (obs 348, act 17), the recipe's networks (actor 512, critics 768, 2 x C51 with
101 atoms), num_updates=8 per call with policy_frequency=4 (8 critic : 2 actor updates), the replay
buffer on the learner device. Counts critic updates; each includes its share of actor updates,
sampling and normalisation.

    uv run --frozen python benchmarks/learner_updates.py                      # whatever device is present
    uv run --frozen python benchmarks/learner_updates.py --batch-sizes 1024 --calls 2 --threads 2
    uv run --frozen python benchmarks/learner_updates.py --task humanoid --batch-sizes 7168  # headline's
    uv run --frozen python benchmarks/learner_updates.py --modes compiled step eager-step step-eager-prep
    uv run --frozen python benchmarks/learner_updates.py --task humanoid --batch-sizes 7168 --modes step \
        --calls 3 --warmup 1 --compile-report   # where a cold compile goes (an empty compile cache)

``--task`` takes that task's agent settings instead (e.g. humanoid: policy_frequency 2), so the figure
compares with a trainer run of the task. ``--modes`` (see ``MODES``): ``step`` is the default training
path, each whole step captured as one CUDA graph (``eager-step``: around the eager step); ``compiled``
replays one graph per compiled region (``cudagraph_scope=regions``); on CPU there are no graphs
(``step`` runs like ``compiled``, ``eager-step`` like ``eager``). A compiled mode compiles the batch
preparation too, as the agent does; ``step-eager-prep`` keeps it eager.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Literal

import torch
from _harness import machine

from fastsac_core import EnvDims, ExecutionPolicy, FastSACAgent, FastSACConfig, ReplayBuffer
from fastsac_trainer.tasks import TASKS

HUMANOID = EnvDims(
    obs_dim=348, critic_obs_dim=348, act_dim=17, action_low=(-0.4,) * 17, action_high=(0.4,) * 17,
    critic_obs_is_obs=True,
)  # fmt: skip
"""Humanoid-v5 as the trainer sees it: the critic observes the actor's obs (``--own-critic-obs``: not)."""


MODES: dict[str, tuple[bool, bool, Literal["regions", "step"], bool]] = {
    # compile, CUDA graphs, graph scope, eager batch preparation even when compiling
    "eager": (False, False, "regions", False),
    "compiled": (True, True, "regions", False),
    "step": (True, True, "step", False),
    "eager-step": (False, True, "step", False),
    "step-eager-prep": (True, True, "step", True),
    "step-halves": (True, True, "step", False),
}
"""``compiled``: torch.compile's CUDA graphs per compiled region; ``step``/``eager-step``: each whole
step captured as one CUDA graph around the compiled/eager step (fastsac_core Note [Whole-step graphs]).
Compiling also compiles the batch preparation (normalizer statistics, normalisation), as the agent
does; ``step-eager-prep`` is ``step`` with that preparation eager. ``step-halves`` compiles only each
step's losses and backward (``ExecutionPolicy.in_halves``, as several ranks run it) and leaves the
optimizer steps (fused Adam) and the target update eager inside the captured step: what that saves of
the compile (dynamo traces no optimizer) against what it costs per update."""

IN_HALVES = {"step-halves"}
"""Modes that run each step in halves on one rank."""


def build(
    device: str, batch_size: int, num_envs: int, mode: str, amp: bool, task: str | None, dims: EnvDims
) -> FastSACAgent:
    # A task's agent settings (policy_frequency, value range, ...) as a trainer run of it uses them.
    base = TASKS[task].agent_config() if task is not None else FastSACConfig(gamma=0.99)
    compiled, cudagraphs, scope, eager_prep = MODES[mode]
    cfg = dataclasses.replace(
        base, batch_size=batch_size, buffer_size=256, compile=compiled, cudagraphs=cudagraphs,
        cudagraph_scope=scope, amp=amp,
    )  # fmt: skip
    execution = ExecutionPolicy.choose(cfg, torch.device(device), 1)
    if compiled and device == "cpu":
        # The agent compiles on CUDA only; the benchmark also measures inductor on CPU.
        execution = dataclasses.replace(execution, compile_steps=True, compile_prepare=not eager_prep)
    elif eager_prep:
        execution = dataclasses.replace(execution, compile_prepare=False)
    if mode in IN_HALVES:
        execution = dataclasses.replace(execution, in_halves=True)
    buffer = ReplayBuffer.of(dims, cfg, num_envs, device=device)
    agent = FastSACAgent(dims, cfg, device, buffer=buffer, execution=execution)
    n = num_envs
    for _ in range(64):
        agent.buffer.extend(
            {
                "obs": torch.randn(n, dims.obs_dim, device=device),
                "critic_obs": torch.randn(n, dims.critic_obs_dim, device=device),
                "actions": torch.rand(n, dims.act_dim, device=device) * 0.8 - 0.4,
                "rewards": torch.randn(n, device=device),
                "terminated": torch.rand(n, device=device) < 0.01,
                "truncated": torch.rand(n, device=device) < 0.01,
            }
        )
    return agent


def sync(device: str) -> None:
    """Wait for ``device``'s queued work (a no-op on the CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def measure(agent: FastSACAgent, device: str, warmup: int, calls: int) -> tuple[float, float]:
    """Return (updates/s, seconds of the first call, i.e. compilation included)."""
    num_updates = agent.cfg.num_updates
    t0 = time.perf_counter()
    agent.update(num_updates)
    sync(device)
    first = time.perf_counter() - t0
    for _ in range(warmup):
        agent.update(num_updates)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        metrics = agent.update(num_updates)
    sync(device)
    elapsed = time.perf_counter() - t0
    assert all(bool(torch.isfinite(v)) for v in metrics.values())
    return calls * num_updates / elapsed, first


def host_profile(agent: FastSACAgent, device: str, calls: int) -> None:
    """Print where the host's time goes over ``calls`` update calls (torch profiler, top operators)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    sync(device)
    with profile(activities=activities) as prof:
        for _ in range(calls):
            agent.update(agent.cfg.num_updates)
        sync(device)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


def compile_report() -> None:
    """Print where the compiles so far went (dynamo's phase totals), the graphs and the breaks; then reset."""
    from torch._dynamo.utils import compile_times, counters

    names, values = compile_times(repr="csv", aggregate=True)
    totals = dict(zip(names, (float(v) for v in values), strict=True))
    print("| compile phase | seconds (all calls) |\n|---|---:|")
    for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1])[:15]:
        print(f"| {name} | {seconds:.2f} |")
    for group in ("stats", "inductor", "aot_autograd"):
        print(f"{group}: {dict(counters[group])}")
    breaks = counters["graph_break"]
    print(f"graph breaks: {sum(breaks.values())}")
    for reason, count in breaks.most_common(8):
        lines = [line.strip() for line in reason.splitlines() if line.strip()]
        why = next((line for line in lines if line.startswith("Explanation:")), "")
        print(f"  {count} x {lines[0][:80]} {why[:120]}")
    torch._dynamo.reset()
    counters.clear()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8192, 1024])
    parser.add_argument("--num-envs", type=int, default=None, help="default: 1024 on CUDA, 64 on CPU")
    parser.add_argument("--modes", nargs="+", default=["eager", "step"], choices=sorted(MODES))
    parser.add_argument("--calls", type=int, default=None, help="timed update() calls (8 updates each)")
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    parser.add_argument("--no-amp", action="store_true", help="fp32 on CUDA instead of bf16 autocast")
    parser.add_argument("--profile", type=int, default=0, help="then profile this many calls (host view)")
    parser.add_argument(
        "--compile-report", action="store_true",
        help="after each mode: dynamo's compile times per phase, its graphs and their breaks",
    )  # fmt: skip
    parser.add_argument(
        "--own-critic-obs", action="store_true",
        help="store and normalise a critic observation of its own (as before critic_obs_is_obs)",
    )  # fmt: skip
    parser.add_argument(
        "--task",
        default=None,
        choices=sorted(TASKS),
        help="use this task's agent settings (Humanoid-v5 dims)",
    )
    args = parser.parse_args()
    cuda = args.device == "cuda"
    if args.threads:
        torch.set_num_threads(args.threads)
    num_envs = args.num_envs or (1024 if cuda else 64)
    calls = args.calls or (50 if cuda else 2)
    warmup = args.warmup if args.warmup is not None else (5 if cuda else 1)
    torch.manual_seed(0)

    print(machine(f"{torch.get_num_threads()} torch threads"))
    amp = cuda and not args.no_amp
    print(
        f"device={args.device} num_envs={num_envs} calls={calls}x8 updates warmup={warmup} amp={amp}"
        f" task={args.task or '(recipe defaults, policy_frequency 4)'}"
    )
    dims = dataclasses.replace(HUMANOID, critic_obs_is_obs=False) if args.own_critic_obs else HUMANOID
    print(f"critic observation: {'its own' if args.own_critic_obs else 'the actor obs (shared)'}")
    print("| batch | mode | updates/s | first call (s) |\n|---|---|---|---|")
    for batch_size in args.batch_sizes:
        for mode in args.modes:
            agent = build(args.device, batch_size, num_envs, mode, not args.no_amp, args.task, dims)
            rate, first = measure(agent, args.device, warmup, calls)
            print(f"| {batch_size} | {mode} | {rate:.1f} | {first:.1f} |", flush=True)
            if args.profile:
                host_profile(agent, args.device, args.profile)
            if args.compile_report:
                compile_report()


if __name__ == "__main__":
    main()
