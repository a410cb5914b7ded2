"""The learner's updates/s alone on its GPU, then beside K processes doing a collector's GPU work (issue 28).

In the headline run the learner's own GPU work fills only about two thirds of the time (wiki/benchmarks.md,
"Learner", the in-run profile), while 14 collector processes each hold a CUDA context on the same GPU
and, every env step, run their policy there (obs in, actions out) and copy their transition into a
device buffer (what a CUDA-IPC ring push does). GPU work of different processes is time-sliced, not
overlapped. This script measures whether that alone costs the learner its third: the agent of
``learner_updates.py`` (``--task humanoid``, whole-step graphs) updates for ``--seconds`` with no other
process on the GPU, then with each K of ``--processes`` stand-in collectors, which do only the GPU part
of a collector's step at ``--rate-hz`` each (the rest of the step, MuJoCo on the CPU, is a sleep): load
a new weight snapshot (``--weights-every`` steps; the learner publishes once per update chunk, about as
often as a collector steps), run the policy, copy a transition into a device buffer.

    python3 benchmarks/gpu_contention.py --processes 0 14 --seconds 20            # the GPU host
    uv run --frozen python benchmarks/gpu_contention.py --device cpu --batch-size 256 --envs 4 --seconds 3

On a CPU the stand-ins run their policy on the CPU (it checks the script, not the GPU).
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import time
from multiprocessing.synchronize import Event
from typing import Any

import torch
from _harness import Row, add_output_args, machine, report, timed_rate
from learner_updates import HUMANOID, build, sync

from fastsac_core import EnvDims, FastSACAgent, FastSACConfig, InferencePolicy
from fastsac_trainer.tasks import TASKS


@dataclasses.dataclass(frozen=True)
class StandIn:
    """What a stand-in collector does: ``envs`` observations a step, ``rate_hz`` steps a second."""

    device: str
    dims: EnvDims
    cfg: FastSACConfig
    envs: int
    rate_hz: float
    weights_every: int


def stand_in(job: StandIn, ready: Event, go: Event, stop: Event, rate: Any) -> None:
    """A collector's GPU work at ``job.rate_hz``: new weights loaded, its policy, a transition copied in."""
    device, dims, envs, rate_hz = job.device, job.dims, job.envs, job.rate_hz
    torch.set_num_threads(1)
    policy = InferencePolicy(dims, job.cfg, device=device, amp=device.startswith("cuda"))
    width = 2 * dims.obs_dim + dims.act_dim + 3  # obs, next obs, action, reward and flags
    slot = torch.empty(envs, width, device=device)
    obs, transition = torch.randn(envs, dims.obs_dim), torch.randn(envs, width)
    # A new snapshot: the host weight channel's copy onto the policy's device, then into its parameters.
    flat_host, extras = torch.randn(policy.numel), policy.policy_extras()
    flat = torch.zeros(policy.numel, device=device)
    for _ in range(3):  # warm-up: allocations, kernels loaded
        policy(obs)
    sync(device)
    ready.set()
    while not go.wait(0.5):
        if stop.is_set():
            return
    period, count = 1.0 / rate_hz, 0
    next_at = started = time.perf_counter()
    while not stop.is_set():
        if count % job.weights_every == 0:
            flat.copy_(flat_host)
            policy.load_flat(flat, extras)
        actions = policy(obs)
        actions.cpu()  # the actions go back to the env (a synchronising copy, as in a collector)
        slot.copy_(transition)  # the push into the learner's device buffer
        sync(device)
        count += 1
        next_at += period
        time.sleep(max(0.0, next_at - time.perf_counter()))
    rate.value = count / (time.perf_counter() - started)


def measure(agent: FastSACAgent, device: str, seconds: float) -> float:
    """Updates per second of ``agent`` over ``seconds``: 10 update calls at a time, then the device waits."""
    calls = 10

    def ten_calls() -> None:
        for _ in range(calls):
            agent.update(agent.cfg.num_updates)
        sync(device)

    return timed_rate(ten_calls, seconds, per_step=calls * agent.cfg.num_updates)


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--processes", type=int, nargs="+", default=[0, 14], help="stand-ins, each K")
    parser.add_argument("--rate-hz", type=float, default=60.0, help="env steps per second of each stand-in")
    parser.add_argument("--envs", type=int, default=32, help="envs per stand-in (the headline: 448 / 14)")
    parser.add_argument(
        "--weights-every", type=int, default=1,
        help="steps between weight loads (the headline publishes about once per collector step)",
    )  # fmt: skip
    parser.add_argument("--batch-size", type=int, default=7168)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per K")
    add_output_args(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(machine(f"humanoid, batch {args.batch_size}, stand-ins of {args.envs} envs at {args.rate_hz:g} Hz"))
    num_envs = 1024 if torch.device(args.device).type == "cuda" else 8
    agent = build(args.device, args.batch_size, num_envs, "step", True, "humanoid", HUMANOID)
    started = time.perf_counter()
    agent.update(agent.cfg.num_updates)  # the first call compiles and captures
    sync(args.device)
    print(f"first call (compile and capture): {time.perf_counter() - started:.1f} s", flush=True)
    measure(agent, args.device, 2.0)  # warm
    cfg = TASKS["humanoid"].agent_config()
    job = StandIn(args.device, HUMANOID, cfg, args.envs, args.rate_hz, args.weights_every)
    ctx = mp.get_context("spawn")
    rows: list[Row] = []
    for k in args.processes:
        ready, go, stop = [ctx.Event() for _ in range(k)], ctx.Event(), ctx.Event()
        rates = [ctx.Value("d", 0.0) for _ in range(k)]
        workers = [
            ctx.Process(target=stand_in, args=(job, r, go, stop, v), daemon=True)
            for r, v in zip(ready, rates, strict=True)
        ]
        try:
            for w in workers:
                w.start()
            if not all(r.wait(180) for r in ready):
                raise RuntimeError("a stand-in collector did not get ready within 180 s")
            go.set()
            rate = measure(agent, args.device, args.seconds)
        finally:
            stop.set()
            for w in workers:
                if w.pid is None:  # never started
                    continue
                w.join(30)
                if w.is_alive():
                    w.kill()
                    w.join(5)
        failed = [w.exitcode for w in workers if w.exitcode != 0]
        if failed:
            raise RuntimeError(f"{len(failed)} stand-in collector(s) failed (exit codes {failed}): see above")
        steps = sum(r.value for r in rates)
        rows.append({
            "stand-ins": k, "learner updates/s": rate, "stand-in steps/s (all)": steps,
            "of the first row": rate / rows[0]["learner updates/s"] if rows else 1.0,  # type: ignore[operator]
        })  # fmt: skip
        print(f"{k} stand-ins: {rate:.1f} updates/s", flush=True)
    report("learner updates/s beside stand-in collectors on its device", rows, args.json)


if __name__ == "__main__":
    main()
