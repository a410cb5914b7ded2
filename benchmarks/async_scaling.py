"""Scaling of the asynchronous engine: collectors, learner ingest overhead, collector inference.

Usage: uv run --frozen python benchmarks/async_scaling.py [--collectors 1 2 4 8 14] [--envs 1024]
       [--envs-per-collector 32]
       [--seconds 20] [--learner-seconds 10] [--task Humanoid-v5] [--device cuda]
       [--parts scaling ceiling learner inference] [--no-ceiling] [--shared-cpus]
       [--bare-sleep-ms 0] [--bare-spin-ms 0] [--bare-bind] [--bare-load] [--bare-collector]
       [--bare-remote-reader]
       [--collector-spin-ms 0] [--ingest generations|ragged]

* scaling: env steps/s of N collectors (Humanoid-v5 by default), one pinned CPU each, with one learner on
  ``--device`` (two CPUs of its own) that only drains (tiny networks, ``learning_starts`` never reached),
  measured over ``--seconds`` after boot, with the collectors' wait share. Each N first measures its
  ceiling on the same CPUs just before: N bare processes stepping the same env shard with random actions,
  no learner and no transport (``--no-ceiling`` skips it). ``/ ceiling`` is then the pipeline's own
  efficiency, apart from how the machine's cores slow down under load. The collectors act randomly too
  (``learning_starts`` is never reached, so the learner only drains): MuJoCo's step cost depends on the
  actions, up to 2x between random and saturated ones, and a changing policy would make every N simulate a
  different workload (the inference part measures the policy's own cost). With ``--ingest generations``
  the pipeline assembles generations (one slot from every collector), so over a long run every collector
  goes at the slowest one's pace: ``lockstep`` is N x the slowest bare process, the ceiling of that design
  on cores that are not uniform. ``--bare-sleep-ms``, ``--bare-bind`` and ``--bare-load`` give the bare
  processes one condition of a collector each (idling after each step, numa_bind's CPU and memory binding,
  busy learner CPUs), and ``--bare-collector`` steps them through a real ``Collector`` pushing into its
  own ring (read back in the same process), to find what slows a collector's step
  (``--bare-remote-reader``: into a production-sized ring that one other process on the learner's CPUs
  drains, copying every slot out: a learner's drain alone). Every row also says where the stepping
  processes' wall time went: on their CPU, runnable but waiting for it (``runq``: another thread of this
  machine had it) and the CPU's ``steal`` (the hypervisor gave it to someone else).
  ``--collector-spin-ms`` has a collector facing a full ring poll it that long before each back-off sleep
  (``collector_spin_s``; ``--bare-spin-ms`` is its bare counterpart to ``--bare-sleep-ms``).
  ``--ingest ragged`` has the learner ingest each ring into its own env block instead of assembling
  generations (``async_options.ingest``): no collector waits for the slowest one. ``--shared-cpus`` lets every
  collector (and bare process) run on any of the collectors' CPUs instead of one CPU each: a lockstep
  pipeline then moves at the cores' mean pace, not the slowest one's.
* ceiling: only the bare processes of each N, under the ``--bare-*`` conditions (cheap diagnostics).
* learner: updates/s of the ``humanoid`` task's ``FastSACAgent.update`` chunks alone against the same
  loop draining a host ring before every chunk while a producer process keeps it full (the ingest overhead).
* inference: ms per collector policy call on CPU and on CUDA for the per-collector batch of
  1..N collectors (to choose ``collector_inference_device``).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import multiprocessing as mp
import os
import platform
import tempfile
import time
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Literal

import torch
from scaling_ceiling import (
    BareConditions,
    CollectorSampler,
    CpuShares,
    ceiling,
    mean_shares,
    pinned_topology,
)

from fastsac_async import (
    AsyncOptions,
    EngineSpec,
    EngineStats,
    Ingestor,
    run_engine,
)
from fastsac_async.spec import ring_layout
from fastsac_core import EnvDims, FastSACAgent, FastSACConfig, InferencePolicy
from shm_transport import HostRing, HostRingHandle
from trainer.tasks import TASKS, MujocoEnvFactory, probe_dims


def _machine() -> str:
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{platform.machine()}, {os.cpu_count()} CPUs, {gpu}, torch {torch.__version__}"


def scaling(
    task: str, collectors: int, envs: int, seconds: float, device: str, shared: bool, spin_s: float = 0.0,
    ingest: Literal["generations", "ragged"] = "ragged",
) -> tuple[float, float, dict[str, float], CpuShares]:  # fmt: skip
    """Env steps/s, collectors' wait share, ms per stage occurrence and CPU shares, N collectors.

    ``collectors`` collectors acting randomly and a learner on ``device`` that drains. Each collector
    has a CPU of its own (``shared``: they share the collectors' CPUs) and the learner up to two
    others, as in a real run: an unpinned learner would compete with the collectors for their cores.
    """
    factory = MujocoEnvFactory(env_id=task)
    agent = FastSACConfig(
        actor_hidden_dim=64, critic_hidden_dim=64, num_atoms=11, batch_size=envs, buffer_size=16,
        num_updates=1, learning_starts=10**9, compile=False, cudagraphs=False, amp=False,
    )  # fmt: skip
    ticks: list[EngineStats] = []
    topology = pinned_topology(envs, collectors, device, shared)
    sampler = CollectorSampler({cpu for p in topology.collectors for cpu in p.cpus or ()})

    def on_tick(tick: EngineStats) -> None:
        ticks.append(tick)
        sampler.sample(tick.elapsed_s)

    with tempfile.TemporaryDirectory(prefix="async_scaling_") as run_dir:
        spec = EngineSpec(
            topology=topology,
            env_factory=factory, dims=probe_dims(factory), agent=agent,
            options=AsyncOptions(num_collectors=collectors, utd_mode="learner_bound",
                                 collector_inference_device="cpu", collector_spin_s=spin_s, ingest=ingest),
            seed=0, num_iterations=10**9, logging_interval=5, save_interval=0, run_dir=Path(run_dir),
            time_limit_s=seconds,
        )  # fmt: skip
        run_engine(spec, on_tick)
    late = [t for t in ticks if t.elapsed_s > seconds / 3] or ticks
    rate = sum(t.summary.steps_per_s for t in late) / max(1, len(late))
    stages = sorted({k for t in late for k in t.summary.timing_ms})
    timing = {k: sum(t.summary.timing_ms.get(k, 0.0) for t in late) / len(late) for k in stages}
    wait_pct = sum(t.summary.time_pct.get("wait", 0.0) for t in late) / len(late)
    # Each collector's mean env step: how far the fastest and the slowest core are apart.
    own = [[c.timing_ms["env_step"] for t in late if (c := t.collectors.get(i)) and "env_step" in c.timing_ms]
           for i in range(collectors)]  # fmt: skip
    means = [sum(v) / len(v) for v in own if v] or [math.nan]
    timing["env_step_fastest"], timing["env_step_slowest"] = min(means), max(means)
    return rate, wait_pct, timing, sampler.shares(seconds / 3)


def _produce(handle: HostRingHandle, envs: int, dims: EnvDims, stop: EventType) -> None:
    """A collector stand-in: pushes one slot whenever the ring has room, until ``stop`` is set."""
    torch.set_num_threads(1)
    ring = HostRing.attach(handle)
    fields = _fields(envs, dims)
    try:
        while not stop.is_set():
            if not ring.push(fields):
                time.sleep(1e-4)
    finally:
        ring.close()


def _fields(envs: int, dims: EnvDims) -> dict[str, torch.Tensor]:
    """One slot of random transitions in the task's ring layout."""
    fields = {
        "obs": torch.randn(envs, dims.obs_dim), "critic_obs": torch.randn(envs, dims.critic_obs_dim),
        "actions": torch.rand(envs, dims.act_dim) - 0.5, "rewards": torch.randn(envs),
        "dones": torch.zeros(envs, dtype=torch.bool), "truncations": torch.zeros(envs, dtype=torch.bool),
    }  # fmt: skip
    return {name: fields[name] for name in ring_layout(dims, envs).names}


def learner_overhead(device: str, seconds: float) -> tuple[float, float, float]:
    """(updates/s without ingest, updates/s with ingest, slots ingested per update chunk).

    The headline's learner: the ``humanoid`` task's agent settings, envs and batch (448 envs, batch 7168,
    policy_frequency 2). Its own loop shape: update chunks of ``num_updates`` (8), with a drain of
    whatever the ring holds (up to 8 slots) before each chunk in the second phase, while a spawned
    process keeps that host ring full, i.e. collectors faster than the learner (the worst case for
    ingest: at most one new slot per update, about 8 times a real run's ratio at the recipe's UTD).
    """
    task = TASKS["humanoid"]
    dims = probe_dims(task.env_factory())
    envs = task.num_envs
    cfg = dataclasses.replace(task.agent_config(), buffer_size=64)
    agent = FastSACAgent(dims, cfg, device, num_envs=envs)
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    producer: BaseProcess | None = None
    ring = HostRing.create(ring_layout(dims, envs), 8)
    try:
        producer = ctx.Process(target=_produce, args=(ring.handle, envs, dims, stop), daemon=True)
        ing = Ingestor([ring], agent.buffer, 8)
        fields = _fields(envs, dims)
        for _ in range(8):
            ring.push(fields)
        ing.drain()
        ing.wait_before_sampling()
        for _ in range(3):  # compile and CUDA-graph capture happen over the first calls: keep them out
            agent.update(cfg.num_updates)
        producer.start()
        rates, slots, chunks = [], 0, 0
        for ingest in (False, True):
            _sync(device)
            start = time.perf_counter()
            updates = 0
            while time.perf_counter() - start < seconds:
                if ingest:
                    slots += ing.drain()
                    ing.wait_before_sampling()
                    chunks += 1
                agent.update(cfg.num_updates)
                updates += cfg.num_updates
            _sync(device)
            rates.append(updates / (time.perf_counter() - start))
        return rates[0], rates[1], slots / max(1, chunks)
    finally:
        stop.set()
        if producer is not None and producer.pid is not None:
            producer.join(10)
            if producer.is_alive():
                producer.kill()
                producer.join(5)
        ring.close()
        ring.unlink()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def inference_ms(device: str, batch: int, calls: int = 50) -> float:
    """Ms per collector policy call for ``batch`` envs on ``device`` (Humanoid-v5 sizes)."""
    dims = probe_dims(MujocoEnvFactory(env_id="Humanoid-v5"))
    cuda = device.startswith("cuda")
    policy = InferencePolicy(dims, FastSACConfig(), device=device, compile=False, amp=cuda)
    obs = torch.randn(batch, dims.obs_dim)
    for _ in range(3):
        policy(obs).cpu()
    start = time.perf_counter()
    for _ in range(calls):
        policy(obs).cpu()
    return 1e3 * (time.perf_counter() - start) / calls


def main() -> None:
    """Print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collectors", type=int, nargs="+", default=[1, 2, 4, 8, 14])
    parser.add_argument("--envs", type=int, default=1024, help="envs of the inference part")
    parser.add_argument("--envs-per-collector", type=int, default=32, help="envs of each scaling collector")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--task", default="Humanoid-v5")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--learner-seconds", type=float, default=10.0, help="each phase of the learner part")
    parser.add_argument("--parts", nargs="+", default=["scaling", "learner", "inference"])
    parser.add_argument("--no-ceiling", action="store_true", help="scaling without its bare-process ceiling")
    parser.add_argument(
        "--shared-cpus", action="store_true",
        help="every collector (and bare process) may run on any collector CPU, instead of one CPU each",
    )  # fmt: skip
    parser.add_argument(
        "--bare-sleep-ms", type=float, default=0.0,
        help="ceiling processes sleep this long after each step (does idling slow the next step?)",
    )  # fmt: skip
    parser.add_argument(
        "--bare-spin-ms", type=float, default=0.0,
        help="ceiling processes busy-wait this long after each step (the same gap without idling)",
    )  # fmt: skip
    parser.add_argument(
        "--collector-spin-ms", type=float, default=0.0,
        help="the pipeline's collectors poll a full ring this long before sleeping (collector_spin_s)",
    )  # fmt: skip
    parser.add_argument("--bare-bind", action="store_true", help="ceiling processes bind like collectors")
    parser.add_argument("--bare-load", action="store_true", help="keep the learner's CPUs busy meanwhile")
    parser.add_argument(
        "--bare-collector", action="store_true",
        help="ceiling processes step through a real Collector and its own ring (no other process)",
    )  # fmt: skip
    parser.add_argument(
        "--ingest", choices=["generations", "ragged"], default="ragged",
        help="the learner's ingest mode (async_options.ingest) in the scaling part",
    )  # fmt: skip
    parser.add_argument(
        "--bare-remote-reader", action="store_true",
        help="ceiling processes step through a real Collector whose ring a reader process drains",
    )  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads of the learner/inference parts (workers use 1)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"machine: {_machine()}, {args.threads} torch thread(s) in this process")
    conditions = BareConditions(
        sleep_ms=args.bare_sleep_ms, spin_ms=args.bare_spin_ms, bind=args.bare_bind, load=args.bare_load,
        collector=args.bare_collector, remote_reader=args.bare_remote_reader,
    )  # fmt: skip
    per = args.envs_per_collector
    if "scaling" in args.parts:
        pinning = "collectors sharing their CPUs" if args.shared_cpus else "one pinned CPU per collector"
        pinning += f", collectors spin {args.collector_spin_ms:g} ms on a full ring, {args.ingest} ingest"
        print(f"\n{args.task}, {per} envs per collector, {pinning}, learner on {args.device}, "
              f"{args.seconds:g} s each")  # fmt: skip
        header = (
            f"{'collectors':>10} {'env steps/s':>12} {'x one':>7} {'/ N':>5} {'ceiling':>8} {'/ ceiling':>9}"
        )
        print(header + f" {'lockstep':>8} {'/ lockstep':>10} {'wait %':>6}  collector ms per stage")
        base = None
        for n in args.collectors:
            envs = per * n
            bare = (
                [(math.nan, math.nan, CpuShares(math.nan, math.nan, math.nan))]
                if args.no_ceiling
                else ceiling(args.task, n, envs, args.seconds, args.device, conditions, args.shared_cpus)
            )
            rates, step_ms = [r for r, _, _ in bare], [ms for _, ms, _ in bare]
            top, lockstep = sum(rates), n * min(rates)
            bare_shares = mean_shares([s for *_, s in bare])
            bare_ms = f"bare env_step {min(step_ms):.2f}..{max(step_ms):.2f} ({bare_shares})"
            rate, wait_pct, timing, shares = scaling(
                args.task, n, envs, args.seconds, args.device, args.shared_cpus, args.collector_spin_ms / 1e3,
                args.ingest,
            )  # fmt: skip
            base = base or rate
            stages = " ".join(f"{k} {v:.2f}" for k, v in timing.items())
            print(f"{n:>10} {rate:>12.0f} {rate / base:>7.2f} {rate / base / n:>5.2f} {top:>8.0f} "
                  f"{rate / top:>9.2f} {lockstep:>8.0f} {rate / lockstep:>10.2f} "
                  f"{wait_pct:>6.1f}  {stages} ({shares}); {bare_ms}", flush=True)  # fmt: skip
    if "ceiling" in args.parts:  # the bare processes alone, under the chosen conditions
        print(f"\nbare {args.task} processes, {per} envs each, {args.seconds:g} s, {conditions}, "
              f"shared CPUs {args.shared_cpus}")  # fmt: skip
        for n in args.collectors:
            bare = ceiling(args.task, n, per * n, args.seconds, args.device, conditions, args.shared_cpus)
            rates, step_ms = [r for r, _, _ in bare], [ms for _, ms, _ in bare]
            shares = mean_shares([s for *_, s in bare])
            print(f"{n:>10} {sum(rates):>12.0f}  lockstep {n * min(rates):.0f}  "
                  f"env_step {min(step_ms):.2f}..{max(step_ms):.2f} ms ({shares})", flush=True)  # fmt: skip
    if "learner" in args.parts:
        plain, ingesting, per_chunk = learner_overhead(args.device, args.learner_seconds)
        print(f"\nlearner on {args.device}, task humanoid (448 envs, batch 7168), chunks of 8 updates: "
              f"updates/s without ingest {plain:.1f}, while a producer process keeps its host ring full "
              f"{ingesting:.1f} "
              f"({100 * ingesting / plain:.0f} %, {per_chunk:.1f} slots drained per chunk)")  # fmt: skip
    if "inference" in args.parts:
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        print(f"\n{'collectors':>10} {'batch':>6} " + " ".join(f"{d + ' ms':>9}" for d in devices))
        for n in args.collectors:
            batch = args.envs // n
            cols = " ".join(f"{inference_ms(d, batch):>9.3f}" for d in devices)
            print(f"{n:>10} {batch:>6} {cols}")


if __name__ == "__main__":
    main()
