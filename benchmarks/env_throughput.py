"""Env throughput of fastsac_trainer.tasks.MujocoBatchedEnv: one core stepping a batch, and collector style.

For every task: (a) one process pinned to one core stepping 64 envs with batched random
actions; (b) two processes x 32 envs, each pinned to its own core, stepping at the same time
(aggregate rate); optionally (c) gymnasium's SyncVectorEnv(64) on one core for comparison. With
``--ab N``: the batch, the batch stepping each env through gymnasium's own step, and SyncVectorEnv,
alternated N rounds in one process (ratios robust to a noisy machine).
Prints a table and the machine.

    uv run --frozen python benchmarks/env_throughput.py [--tasks humanoid,halfcheetah] [--seconds 4]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from multiprocessing.synchronize import Barrier

import numpy as np
from _harness import machine

WARMUP_STEPS = 20


def _pin(cpu: int | None) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})


def _measure_batched(task: str, num_envs: int, cpu: int | None, seconds: float, barrier: Barrier) -> float:
    """Env steps per second of one MujocoBatchedEnv shard (runs in a spawned process)."""
    _pin(cpu)
    from fastsac_trainer.tasks import get_task

    env = get_task(task).env_factory()(num_envs, cpu or 0)
    try:
        env.reset()
        for _ in range(WARMUP_STEPS):
            env.step(env.sample_actions())
        barrier.wait(timeout=120)
        steps = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            env.step(env.sample_actions())
            steps += num_envs
        return steps / elapsed
    finally:
        env.close()


def _measure_sync_vector(
    task: str, num_envs: int, cpu: int | None, seconds: float, barrier: Barrier
) -> float:
    """Env steps per second of gymnasium.vector.SyncVectorEnv (for comparison)."""
    _pin(cpu)
    import gymnasium as gym

    from fastsac_trainer.tasks import get_task, quiet_mujoco_compiler

    spec = get_task(task)
    with quiet_mujoco_compiler():
        env = gym.vector.SyncVectorEnv([lambda: gym.make(spec.env_id) for _ in range(num_envs)])
    try:
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        low, high = env.single_action_space.low, env.single_action_space.high
        shape = (num_envs, *env.single_action_space.shape)
        for _ in range(WARMUP_STEPS):
            env.step(rng.uniform(low, high, shape).astype(np.float32))
        barrier.wait(timeout=120)
        steps = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            env.step(rng.uniform(low, high, shape).astype(np.float32))
            steps += num_envs
        return steps / elapsed
    finally:
        env.close()


def _worker(
    kind: str, task: str, num_envs: int, cpu: int | None, seconds: float, barrier: Barrier, out: mp.Queue
) -> None:  # type: ignore[type-arg]
    fn = _measure_batched if kind == "batched" else _measure_sync_vector
    out.put(fn(task, num_envs, cpu, seconds, barrier))


def _rate(step: Callable[[], object], num_envs: int, seconds: float) -> float:
    steps, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        step()
        steps += num_envs
    return steps / elapsed


def ab_compare(task: str, num_envs: int, rounds: int, seconds: float) -> tuple[float, float, float]:
    """Median steps/s of MujocoBatchedEnv, the same with each env's own step, and SyncVectorEnv.

    All three alternated in one process on one core: alternating short rounds exposes them to the
    same background load, so their ratios are meaningful on a shared machine even when the absolute
    figures are not. The second is ``MujocoBatchedEnv(batched_step=False)``: the built-in envs
    stepped through gymnasium's own ``step`` (Note [native step] in ``fastsac_trainer.tasks``).
    """
    import gymnasium as gym

    from fastsac_trainer.tasks import MujocoBatchedEnv, get_task, quiet_mujoco_compiler

    _pin(sorted(os.sched_getaffinity(0))[0] if hasattr(os, "sched_getaffinity") else None)
    spec = get_task(task)
    factory = spec.env_factory()
    ours = factory(num_envs, 0)
    own_steps = MujocoBatchedEnv(
        factory.env_id, num_envs, 0, max_episode_steps=factory.max_episode_steps,
        env_kwargs=factory.env_kwargs, keep_wrappers=factory.keep_wrappers, batched_step=False,
    )  # fmt: skip
    with quiet_mujoco_compiler():
        vec = gym.vector.SyncVectorEnv([lambda: gym.make(spec.env_id) for _ in range(num_envs)])
    rng = np.random.default_rng(0)
    low, high = vec.single_action_space.low, vec.single_action_space.high
    shape = (num_envs, *vec.single_action_space.shape)
    ours.reset()
    own_steps.reset()
    vec.reset(seed=0)
    a, b, c = [], [], []
    for _ in range(rounds):
        a.append(_rate(lambda: ours.step(ours.sample_actions()), num_envs, seconds))
        b.append(_rate(lambda: own_steps.step(own_steps.sample_actions()), num_envs, seconds))
        c.append(_rate(lambda: vec.step(rng.uniform(low, high, shape).astype(np.float32)), num_envs, seconds))
    ours.close()
    own_steps.close()
    vec.close()
    return float(np.median(a)), float(np.median(b)), float(np.median(c))


def best(repeats: int, kind: str, task: str, num_envs: int, cpus: list[int | None], seconds: float) -> float:
    """Best aggregate rate of ``repeats`` runs of one cell (load from other processes only slows a run)."""
    return max(run(kind, task, num_envs, cpus, seconds) for _ in range(repeats))


def run(kind: str, task: str, num_envs: int, cpus: list[int | None], seconds: float) -> float:
    """Aggregate env steps/s of len(cpus) spawned processes stepping num_envs each at the same time."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(cpus))
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [
        ctx.Process(target=_worker, args=(kind, task, num_envs, cpu, seconds, barrier, out)) for cpu in cpus
    ]
    for p in procs:
        p.start()
    rates = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return float(sum(rates))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", default="humanoid,ant,halfcheetah,hopper,walker2d,pendulum")
    parser.add_argument("--seconds", type=float, default=4.0, help="measuring time per cell")
    parser.add_argument("--num-envs", type=int, default=64, help="envs of the one-process cell")
    parser.add_argument("--repeats", type=int, default=1, help="best of this many runs per cell (noisy VMs)")
    parser.add_argument("--ab", type=int, default=0, help="rounds of an alternated ours-vs-SyncVectorEnv run")
    parser.add_argument("--sync-vector", action="store_true", help="also time gymnasium SyncVectorEnv")
    args = parser.parse_args()

    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [None]
    two = [cpus[0], cpus[1]] if ncpu >= 2 else [None, None]
    n, half = args.num_envs, args.num_envs // 2
    header = f"| task | 1 proc x {n} envs, 1 core | 2 procs x {half} envs, 1 core each |"
    sep = "|---|---:|---:|"
    if args.sync_vector:
        header += f" SyncVectorEnv({n}), 1 core |"
        sep += "---:|"
    import gymnasium
    import mujoco

    print(machine(f"mujoco {mujoco.__version__}, gymnasium {gymnasium.__version__}"))
    print(f"env steps/s, batched random actions, {args.seconds:.0f} s per cell, best of {args.repeats}")
    print(f"load average before: {os.getloadavg()[0]:.1f}\n")
    if args.ab:
        print(
            f"| task | MujocoBatchedEnv({n}) | the same, each env's own step | SyncVectorEnv({n}) |"
            f" ratios | (median of {args.ab} alternated rounds)"
        )
        print("|---|---:|---:|---:|---|")
        for task in args.tasks.split(","):
            ours, own, theirs = ab_compare(task, n, args.ab, args.seconds)
            ratios = f"{ours / own:.2f}, {ours / theirs:.2f}"
            print(f"| {task} | {ours:,.0f} | {own:,.0f} | {theirs:,.0f} | {ratios} |", flush=True)
        return
    print(header)
    print(sep)
    for task in args.tasks.split(","):
        one = best(args.repeats, "batched", task, n, [cpus[0]], args.seconds)
        pair = best(args.repeats, "batched", task, half, list(two), args.seconds)
        row = f"| {task} | {one:,.0f} | {pair:,.0f} |"
        if args.sync_vector:
            row += f" {best(args.repeats, 'sync_vector', task, n, [cpus[0]], args.seconds):,.0f} |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
