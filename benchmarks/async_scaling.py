"""Scaling of the asynchronous engine: collectors, the learner in a run, collector inference.

    uv run --frozen python benchmarks/async_scaling.py [--parts scaling learner inference]
        [--task humanoid] [--collectors 1 2 4 8 14] [--envs-per-collector 32] [--seconds 20]
        [--device cuda] [--no-ceiling] [--json PATH] [-- OVERRIDE ...]

Every part runs the real trainer (``apps/trainer``) and reads its run folder; trailing ``OVERRIDE``s go
to every trainer run (e.g. ``algo.trainer.async_options.ingest=generations``).

* scaling: env steps/s of N collectors (32 envs each, one pinned CPU each: ``cpus_per_collector=1``)
  and one learner on ``--device`` that only drains (tiny networks, ``learning_starts`` never reached,
  so the collectors act randomly: MuJoCo's step cost depends on the actions, and a changing policy
  would make every N simulate a different workload), the median of the ticks after the first third of
  them, with the collectors' wait share and ms per step. Then its ceiling on the CPUs those
  collectors had: N bare processes stepping the same env shards with random actions, no learner and no
  transport (``--no-ceiling`` skips it). ``/ ceiling`` is the pipeline's own efficiency, apart from how
  the machine's cores slow down under load; ``lockstep`` (N x the slowest bare process) is the ceiling
  of generation ingest, which moves every collector at the slowest one's pace.
* learner: updates/s of the task's learner in a training run (``utd_mode=learner_bound``: it drains,
  decides and publishes between update chunks, as fast as it can) against the same agent's updates
  alone (``learner_updates.py``'s measurement): the seeds' "updates/s while ingesting / without".
* inference: ms per collector policy call on CPU and on CUDA (eager and compiled) for the per-collector
  batch when 1024 envs are split over N collectors (to choose ``collector_inference_device`` and
  ``collector_compile``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path

import torch
from _harness import Row, TrainerRun, add_output_args, machine, report, run_trainer, timed_rate
from learner_updates import build, measure

from fastsac_core import FastSACConfig, InferencePolicy
from fastsac_trainer.tasks import TASKS, probe_dims

_DRAIN_ONLY = [
    "algo.trainer.async_options.cpus_per_collector=1",
    "algo.trainer.async_options.collector_inference_device=cpu",
    "algo.trainer.async_options.utd_mode=learner_bound",
    "algo.agent.actor_hidden_dim=64",
    "algo.agent.critic_hidden_dim=64",
    "algo.agent.num_atoms=11",
    "algo.agent.buffer_size=16",
    "algo.agent.num_updates=1",
    "algo.agent.learning_starts=1000000000",
    "algo.agent.compile=false",
    "algo.agent.cudagraphs=false",
    "algo.agent.amp=false",
    "algo.trainer.num_learning_iterations=1000000000",
    "algo.trainer.logging_interval=5",
]
"""Collectors acting randomly, one pinned CPU each, and a learner that only drains."""

INFERENCE_ENVS = 1024


def scaling(
    task: str, n: int, per: int, seconds: float, device: str, extra: list[str], root: Path
) -> TrainerRun:
    """A drain-only trainer run of ``n`` collectors of ``per`` envs each for ``seconds``."""
    overrides = [f"task={task}", f"task.num_envs={n * per}", f"algo.agent.batch_size={n * per}"]
    overrides += [f"algo.trainer.async_options.num_collectors={n}", f"algo.trainer.device={device}"]
    overrides += [*_DRAIN_ONLY, f"algo.trainer.time_limit_s={seconds}", *extra]
    return run_trainer(overrides, f"scaling{n}", root, timeout_s=seconds + 300)


def _bare(
    env_id: str, envs: int, cpus: tuple[int, ...], seconds: float, out: mp.Queue[tuple[float, float]]
) -> None:
    """One ceiling process on ``cpus``: (env steps/s, ms per step) over the last 2/3 of ``seconds``."""
    from fastsac_trainer.tasks import MujocoEnvFactory

    os.sched_setaffinity(0, cpus)
    torch.set_num_threads(1)
    env = MujocoEnvFactory(env_id=env_id)(envs, 0)
    env.reset()
    deadline = time.perf_counter() + seconds / 3
    while time.perf_counter() < deadline:
        env.step(env.sample_actions())
    rate = timed_rate(lambda: env.step(env.sample_actions()), seconds * 2 / 3, per_step=envs)
    out.put((rate, 1e3 * envs / rate))


def ceiling(
    env_id: str, per: int, cpus: dict[int, tuple[int, ...]], seconds: float
) -> list[tuple[float, float]]:
    """(env steps/s, ms per step) of one bare process on each collector's CPUs, all at once."""
    if not cpus:
        raise RuntimeError("no collector's CPUs were read from the run: pass --no-ceiling")
    ctx = mp.get_context("spawn")
    out: mp.Queue[tuple[float, float]] = ctx.Queue()
    procs = [
        ctx.Process(target=_bare, args=(env_id, per, c, seconds, out), daemon=True) for c in cpus.values()
    ]
    try:
        for p in procs:
            p.start()
        return [out.get(timeout=seconds + 120) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)


def scaling_row(args: argparse.Namespace, n: int, root: Path) -> tuple[float, Row]:
    """Env steps/s of the scaling run of ``n`` collectors, and its other columns (with its ceiling)."""
    per = args.envs_per_collector
    run = scaling(args.task, n, per, args.seconds, args.device, args.overrides, root)
    rate = run.median("perf/env_steps_per_s")
    row: Row = {"wait %": run.median("perf/collector_wait_pct"),
                "env_step ms": run.median("perf/collector_env_step_ms")}  # fmt: skip
    if not args.no_ceiling:
        bare = ceiling(TASKS[args.task].env_id, per, run.collector_cpus, args.seconds)
        rates, ms = [r for r, _ in bare], [m for _, m in bare]
        row |= {"ceiling": sum(rates), "/ ceiling": rate / sum(rates), "lockstep": n * min(rates),
                "bare ms fastest..slowest": f"{min(ms):.2f}..{max(ms):.2f}"}  # fmt: skip
    return rate, row


def learner(task: str, seconds: float, device: str, extra: list[str], root: Path) -> Row:
    """Updates/s of ``task``'s learner in a training run against its agent's updates alone."""
    spec = TASKS[task]
    cfg = spec.agent_config()
    dims = probe_dims(spec.env_factory())
    cuda = device.startswith("cuda")
    agent = build(device, cfg.batch_size, spec.num_envs, "step" if cuda else "eager", cuda, task, dims)
    alone, _ = measure(agent, device, warmup=3, calls=max(2, int(seconds)))
    del agent
    overrides = [f"task={task}", f"algo.trainer.device={device}", f"algo.trainer.time_limit_s={seconds}"]
    overrides += ["algo.trainer.async_options.utd_mode=learner_bound", *extra]
    run = run_trainer(overrides, "learner", root, timeout_s=seconds + 400)
    in_run = run.median("perf/updates_per_s")  # the first third of the ticks holds the first chunk's compile
    learn_pct = run.median("perf/learn_pct")
    return {"task": task, "batch": cfg.batch_size, "alone updates/s": alone, "in a run": in_run,
            "in a run / alone": in_run / alone, "learn %": learn_pct}  # fmt: skip


def inference_ms(task: str, device: str, batch: int, compiled: bool = False) -> float:
    """Ms per collector policy call for ``batch`` envs of ``task`` on ``device`` (``compile``: compiled)."""
    spec = TASKS[task]
    dims = probe_dims(spec.env_factory())
    cfg: FastSACConfig = spec.agent_config()
    policy = InferencePolicy(dims, cfg, device=device, compile=compiled, amp=device.startswith("cuda"))
    obs = torch.randn(batch, dims.obs_dim)
    for _ in range(3):
        policy(obs).cpu()
    return 1e3 / timed_rate(lambda: policy(obs).cpu(), seconds=1.0)


def main() -> None:
    """Print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["scaling", "learner", "inference"])
    parser.add_argument("--task", default="humanoid", choices=sorted(TASKS))
    parser.add_argument("--collectors", type=int, nargs="+", default=[1, 2, 4, 8, 14])
    parser.add_argument("--envs-per-collector", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20.0, help="training time of each trainer run")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--no-ceiling", action="store_true", help="scaling without its bare-process ceiling")
    parser.add_argument("overrides", nargs="*", help="trainer overrides for every run (after --)")
    add_output_args(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the workers run
    print(machine())
    env_id = TASKS[args.task].env_id
    with tempfile.TemporaryDirectory(prefix="async_scaling_") as tmp:
        root = Path(tmp)
        if "scaling" in args.parts:
            rows: list[Row] = []
            one = None
            for n in args.collectors:
                rate, more = scaling_row(args, n, root)
                one = one or rate
                rows.append(
                    {"collectors": n, "env steps/s": rate, "x one": rate / one, "/ N": rate / one / n, **more}
                )
            title = f"{env_id}, {args.envs_per_collector} envs per collector, "
            report(
                title + f"learner on {args.device}, {args.seconds:g} s {' '.join(args.overrides)}",
                rows,
                args.json,
            )
        if "learner" in args.parts:
            row = learner(args.task, args.seconds, args.device, args.overrides, root)
            report(f"learner on {args.device}", [row], args.json)
    if "inference" in args.parts:
        ways = [("cpu", False)] + ([("cuda", False), ("cuda", True)] if torch.cuda.is_available() else [])
        rows = [{"collectors": n, "batch": INFERENCE_ENVS // n,
                 **{f"{d}{' compiled' if c else ''} ms": inference_ms(args.task, d, INFERENCE_ENVS // n, c)
                    for d, c in ways}}
                for n in args.collectors]  # fmt: skip
        report(f"collector policy call, {env_id}", rows, args.json)


if __name__ == "__main__":
    main()
