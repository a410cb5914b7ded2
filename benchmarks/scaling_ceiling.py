"""Bare stepping processes and CPU-time accounting for the collector-scaling benchmark.

The ceiling of ``benchmarks/async_scaling.py``: N processes stepping the same env shards as N
collectors on the same CPUs, without learner or transport, under one collector condition at a time
(:class:`BareConditions`), and where a stepping process's wall time went (:class:`CpuShares`: on its
CPU, waiting in the run queue, stolen by the hypervisor), read from ``/proc``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing as mp
import os
import queue
import time
from collections.abc import Callable
from multiprocessing.synchronize import Event as EventType

import psutil  # type: ignore[import-untyped]
import torch

from fastsac_async import AsyncOptions, Collector, CollectorSettings
from fastsac_async.spec import ring_layout
from fastsac_core import BatchedEnv, FastSACConfig, InferencePolicy
from numa_bind import bind_current_process, discover_host
from shm_transport import HostRing, HostRingHandle
from topology import TrainerTopology, resolve_trainer_topology
from trainer.tasks import MujocoEnvFactory, probe_dims


def pinned_topology(envs: int, collectors: int, device: str, shared: bool = False) -> TrainerTopology:
    """The production layout: the learner on ``device`` with up to 2 CPUs of its own, the rest for collectors.

    Each collector is pinned to one CPU of its own (``cpus_per_collector=1``), or with ``shared`` every
    collector may run on any of the collectors' CPUs (then there may be more collectors than CPUs).
    """
    allowed = sorted(os.sched_getaffinity(0))
    cpus_per_learner = min(2, max(1, len(allowed) - (1 if shared else collectors)))
    topology = resolve_trainer_topology(
        num_envs=envs, num_collectors=collectors, num_learners=1, batch_size=envs, trainer_device=device,
        learner_devices=None, num_cuda_devices=torch.cuda.device_count() if device.startswith("cuda") else 0,
        collector_inference_device="cpu", cpus_per_collector=None if shared else 1,
        cpus_per_learner=cpus_per_learner, transition_ipc="off", weight_ipc="off",
        weight_ipc_min_bytes=1 << 24, actor_param_bytes=0,
        host=discover_host(with_gpus=device.startswith("cuda")),
    )  # fmt: skip
    if not shared:
        return topology
    # cpus_per_collector=None pins nothing on a one-node host: the learner takes the last CPUs (as in the
    # session-5 figures), the collectors share the others.
    learner_cpus, pool = tuple(allowed[-cpus_per_learner:]), tuple(allowed[:-cpus_per_learner])
    return dataclasses.replace(
        topology,
        learners=tuple(dataclasses.replace(p, cpus=learner_cpus) for p in topology.learners),
        collectors=tuple(dataclasses.replace(p, cpus=pool) for p in topology.collectors),
    )


def schedstat(task: str = "thread-self") -> tuple[float, float]:
    """(s on a CPU, s runnable but waiting for a CPU) of a thread so far (``/proc/<task>/schedstat``).

    ``task`` is ``thread-self`` or a pid (whose main thread is read).
    """
    with open(f"/proc/{task}/schedstat") as f:
        run_ns, wait_ns, _ = f.read().split()
    return int(run_ns) / 1e9, int(wait_ns) / 1e9


def cpu_steal(cpus: list[int]) -> tuple[int, int]:
    """(all jiffies, stolen jiffies) so far, summed over ``cpus`` (``/proc/stat``).

    Steal: the hypervisor ran something else on the vCPU while it had work.
    """
    total = steal = 0
    with open("/proc/stat") as f:
        for line in f:
            name, *values = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                ticks = [int(v) for v in values]
                total += sum(ticks[:8])  # user nice system idle iowait irq softirq steal (guest is in user)
                steal += ticks[7]
    return total, steal


@dataclasses.dataclass(frozen=True)
class CpuShares:
    """Where a stepping process's wall time went, in percent, apart from its own CPU work."""

    on_cpu: float
    """Its main thread ran (env steps, and for a collector also the pipeline's own work)."""
    runq: float
    """Its main thread was runnable but another thread had its CPU (contention inside the guest)."""
    steal: float
    """Its CPU's time the hypervisor gave to someone else (contention outside the guest)."""

    def __str__(self) -> str:
        return f"cpu {self.on_cpu:.0f}% runq {self.runq:.1f}% steal {self.steal:.1f}%"


def cpu_shares(
    wall: float, before: tuple[float, float], after: tuple[float, float],
    steal: tuple[int, int], steal_after: tuple[int, int],
) -> CpuShares:  # fmt: skip
    """Shares over ``wall`` seconds from two ``schedstat`` readings and two ``cpu_steal`` readings."""
    jiffies = max(1, steal_after[0] - steal[0])
    return CpuShares(
        on_cpu=100 * (after[0] - before[0]) / wall,
        runq=100 * (after[1] - before[1]) / wall,
        steal=100 * (steal_after[1] - steal[1]) / jiffies,
    )


def mean_shares(shares: list[CpuShares]) -> CpuShares:
    """The mean of each share over several processes."""
    n = max(1, len(shares))
    return CpuShares(*(sum(getattr(s, f.name) for s in shares) / n for f in dataclasses.fields(CpuShares)))


class CollectorSampler:
    """Schedstat of every collector process and steal of the collectors' CPUs, sampled at each stats tick."""

    def __init__(self, cpus: set[int]) -> None:
        self.cpus = cpus
        self.samples: list[tuple[float, float, dict[int, tuple[float, float]], tuple[int, int]]] = []

    def sample(self, elapsed: float) -> None:
        """Record (elapsed, wall, {pid: schedstat} of the collectors, steal of their CPUs) now."""
        stats: dict[int, tuple[float, float]] = {}
        for child in psutil.Process().children():
            with contextlib.suppress(psutil.Error, OSError, ValueError):
                if set(child.cpu_affinity()) <= self.cpus:  # the learner has CPUs of its own
                    stats[child.pid] = schedstat(str(child.pid))
        self.samples.append((elapsed, time.monotonic(), stats, cpu_steal(sorted(self.cpus))))

    def shares(self, after_s: float) -> CpuShares:
        """Mean shares of the collectors between the first sample after ``after_s`` and the last."""
        late = [s for s in self.samples if s[0] > after_s]
        if len(late) < 2:
            return CpuShares(math.nan, math.nan, math.nan)
        (_, t0, run0, steal0), (_, t1, run1, steal1) = late[0], late[-1]
        return mean_shares(
            [cpu_shares(t1 - t0, run0[pid], run1[pid], steal0, steal1) for pid in run0 if pid in run1]
        )


@dataclasses.dataclass(frozen=True)
class BareConditions:
    """What the ceiling's bare processes share with a pipeline's collectors, to find what slows them."""

    sleep_ms: float = 0.0
    """Idle this long after each step, as a waiting collector does."""
    spin_ms: float = 0.0
    """Busy-wait this long after each step (a gap like ``sleep_ms``, without idling the CPU)."""
    bind: bool = False
    """Bind CPU and memory with numa_bind as a collector does (memory policy included)."""
    load: bool = False
    """Keep the learner's CPUs busy meanwhile (one spinning process on each)."""
    collector: bool = False
    """Step through a real :class:`Collector` (its own ring, read back in the same process)."""
    remote_reader: bool = False
    """Step through a real :class:`Collector` whose ring (production capacity) another process reads:
    one reader on the learner's CPUs copies every slot out, as a learner's host drain does."""


def _bare_steps(
    task: str, envs: int, cpus: tuple[int, ...] | None, node: int | None, seconds: float,
    cond: BareConditions, out: mp.Queue[tuple[float, float, CpuShares]], ring: HostRingHandle | None = None,
) -> None:  # fmt: skip
    """One ceiling process: step ``envs`` envs with random actions under ``cond``.

    Puts (env steps/s, mean ms inside ``env.step``, CPU shares) over the last 2/3 of ``seconds``.
    """
    if cond.bind:
        bind_current_process(cpus=cpus, nodes=None if node is None else [node])
    elif cpus is not None:
        os.sched_setaffinity(0, cpus)
    torch.set_num_threads(1)
    env = MujocoEnvFactory(env_id=task)(envs, 0)
    step = _collector_step(env, ring) if cond.collector or ring is not None else _plain_step(env)
    start = time.perf_counter()
    measured_from, steps, in_step = start + seconds / 3, 0, 0.0
    mine = sorted(os.sched_getaffinity(0))
    first: tuple[float, tuple[float, float], tuple[int, int]] | None = None
    while (now := time.perf_counter()) < start + seconds:
        if now >= measured_from and first is None:
            first = (now, schedstat(), cpu_steal(mine))
        ms = step()
        if now >= measured_from:
            steps += 1
            in_step += ms
        if cond.sleep_ms > 0:
            time.sleep(cond.sleep_ms / 1e3)
        until = time.perf_counter() + cond.spin_ms / 1e3
        while time.perf_counter() < until:
            pass
    assert first is not None, "the measured window was empty"
    shares = cpu_shares(time.perf_counter() - first[0], first[1], schedstat(), first[2], cpu_steal(mine))
    out.put((steps * envs / (seconds * 2 / 3), in_step / max(1, steps), shares))


def _plain_step(env: BatchedEnv) -> Callable[[], float]:
    """A bare step: random actions into ``env.step``; returns ms inside it."""
    env.reset()

    def step() -> float:
        actions = env.sample_actions()
        start = time.perf_counter()
        env.step(actions)
        return 1e3 * (time.perf_counter() - start)

    return step


def _collector_step(env: BatchedEnv, remote: HostRingHandle | None = None) -> Callable[[], float]:
    """A real :class:`Collector` step (random actions, one pushed slot); returns ms in env.step.

    Without ``remote`` the collector's ring is its own, read back right after each push: everything a
    pipeline collector does in its own thread, without any other process. With it, the collector
    pushes into that ring, which another process reads (waiting, as a collector does, while it is full).
    """
    dims = env.dims
    if remote is None:
        ring = HostRing.create(ring_layout(dims, env.num_envs), 8)
        ring.unlink()  # only this process maps it: no name to leak
    else:
        ring = HostRing.attach(remote)
    settings = CollectorSettings(
        index=0, budget=10**12, learning_starts=10**12, resume=False, weight_poll_interval=1,
        idle_sleep_s=5e-4, stats_interval=10**9,
    )  # fmt: skip
    tiny = FastSACConfig(actor_hidden_dim=64, critic_hidden_dim=64, num_atoms=11)
    collector = Collector(settings=settings, env=env, ring=ring, weights=None,
                          policy=InferencePolicy(dims, tiny, device="cpu"))  # fmt: skip

    def step() -> float:
        before = collector.timer.total_s("env_step")
        if remote is None:
            assert collector.step_once(), "the ring is read back after every push"
            ring.commit_reads(ring.read_span(8)[0])
        else:
            while not collector.step_once():
                pass
        return 1e3 * (collector.timer.total_s("env_step") - before)

    return step


def _read_rings(handles: list[HostRingHandle], cpus: tuple[int, ...] | None, stop: EventType) -> None:
    """A learner's host drain without the learner: copy every new slot of every ring out, then commit."""
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    torch.set_num_threads(1)
    rings = [HostRing.attach(h) for h in handles]
    sinks: dict[str, torch.Tensor] = {}
    try:
        while not stop.is_set():
            took = 0
            for ring in rings:
                count, views = ring.read_span(8)
                for name, view in views.items():
                    sink = sinks.setdefault(name, torch.empty_like(view))
                    if sink.shape != view.shape:
                        sink = sinks[name] = torch.empty_like(view)
                    sink.copy_(view)
                ring.commit_reads(count)
                took += count
            if not took:
                time.sleep(5e-4)  # a learner's idle sleep
    finally:
        for ring in rings:
            ring.close()


def _spin(cpu: int, stop: EventType) -> None:
    """Keep one CPU busy until ``stop`` is set (a stand-in for a learner's busy thread)."""
    os.sched_setaffinity(0, {cpu})
    while not stop.is_set():
        for _ in range(10_000):
            pass


def ceiling(
    task: str, collectors: int, envs: int, seconds: float, device: str, cond: BareConditions, shared: bool
) -> list[tuple[float, float, CpuShares]]:
    """(env steps/s, env_step ms, CPU shares) of ``collectors`` bare processes on the collectors' CPUs."""
    topology = pinned_topology(envs, collectors, device, shared)
    ctx = mp.get_context("spawn")
    out: mp.Queue[tuple[float, float, CpuShares]] = ctx.Queue()
    stop = ctx.Event()
    rings = (
        [HostRing.create(ring_layout(probe_dims(MujocoEnvFactory(env_id=task)), envs // collectors),
                         AsyncOptions().ring_capacity) for _ in topology.collectors]
        if cond.remote_reader else []
    )  # fmt: skip
    stepping = [
        ctx.Process(target=_bare_steps, args=(task, envs // collectors, p.cpus, p.numa_node, seconds, cond,
                                              out, rings[i].handle if rings else None), daemon=True)
        for i, p in enumerate(topology.collectors)
    ]  # fmt: skip
    spinning = [
        ctx.Process(target=_spin, args=(c, stop), daemon=True)
        for c in (topology.learners[0].cpus or () if cond.load else ())
    ]
    if rings:
        spinning.append(
            ctx.Process(
                target=_read_rings,
                args=([r.handle for r in rings], topology.learners[0].cpus, stop),
                daemon=True,
            )
        )
    results: list[tuple[float, float, CpuShares]] = []
    try:
        for proc in stepping + spinning:
            proc.start()
        deadline = time.monotonic() + seconds + 120
        while len(results) < len(stepping):
            try:
                results.append(out.get(timeout=1.0))
            except queue.Empty:
                failed = [p.exitcode for p in stepping if p.exitcode not in (None, 0)]
                if failed or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"bare processes did not report (exit codes {failed}, {len(results)} of "
                        f"{len(stepping)} reported)"
                    ) from None
        return results
    finally:
        stop.set()
        for proc in stepping + spinning:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        for ring in rings:
            ring.close()
            ring.unlink()
