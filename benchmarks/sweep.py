r"""Several trainer configurations side by side on one host, the same wall-clock budget, one table.

    python3 benchmarks/sweep.py --task walker2d --seeds 1 2 --parallel 4 --time-limit 150 \
        --config base= --config g997="algo.agent.gamma=0.997 algo.agent.v_max=1500"

Every (configuration, seed) pair is one trainer run. ``--parallel K`` runs K at once, each pinned to its
own 1/K of this process's CPUs (the trainer sizes its collectors to the CPUs it is allowed), all on the
same GPUs; a slot that frees takes the next run. Each run trains for ``--time-limit`` seconds, then its
final checkpoint is evaluated deterministically on the same CPUs (``trainer eval``, ``--episodes``), as
a user measures it. The table gives, per run: the eval return (mean, std, min over the episodes), the
mean episode length, the best and the last in-run eval (``eval/return``: a final checkpoint far below
its run's last eval fell in the last seconds), the last training return and ``train/qf_max`` (at the
critics' support top, v_max, the targets are clipped: Note [support watch]), env steps, the replay reuse
(``async/reuse``: gradient samples per collected transition), the seconds from launch to the first
update, to the compiled switch (``perf/compiled``; the first update itself when the learner compiles
first) and to the exit, the run's pace (medians after the first third of the ticks: env steps/s,
updates/s, the learner's idle share and a collector's env step in ms, to tell who waits for whom), and
with ``--reach R`` / ``--reach-eval R`` to the first training return / in-run eval of at least R; then
one row per configuration: the mean over seeds and the lowest seed. ``--json PATH`` keeps the rows, and
beside it each run's scalar series (``PATH-stem.RUN.curves.json``: seconds from launch, step, value) and
its logs folder (``PATH-stem.RUN.logs/``: the boot marks of every worker).

Configurations are ``NAME=OVERRIDES`` (hydra overrides separated by spaces; ``NAME=`` alone is the
task's defaults). ``--common`` adds overrides to every run (``task=gym task.env_id=Hopper-v5``).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import statistics
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from _harness import ROOT, Row, add_output_args, launch_trainer, machine, read_scalars, report

from fastsac_async.run_layout import RunLayout

_EVAL_LINE = re.compile(
    r"mean return (?P<mean>-?[\d.]+) \(std (?P<std>[\d.]+), min (?P<min>-?[\d.]+), max (?P<max>-?[\d.]+)\)"
    r" over \d+ episodes, mean length (?P<len>[\d.]+)"
)


@dataclass(frozen=True)
class Job:
    """One trainer run of the sweep."""

    config: str
    """The configuration's name."""
    overrides: tuple[str, ...]
    """Its hydra overrides (after the common ones)."""
    seed: int
    """The run's seed."""

    @property
    def name(self) -> str:
        """The run folder's name."""
        return f"{self.config}_s{self.seed}"


def parse_config(text: str) -> tuple[str, tuple[str, ...]]:
    """``NAME=OVERRIDES`` -> (name, overrides)."""
    name, eq, rest = text.partition("=")
    if not eq or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise SystemExit(
            f"--config {text!r} is invalid: write NAME=OVERRIDES with a plain NAME (NAME= for none)"
        )
    return name, tuple(rest.split())


def cpu_slices(cpus: list[int], k: int) -> list[list[int]]:
    """``cpus`` cut into ``k`` contiguous slices of equal size (the remainder left unused)."""
    size = len(cpus) // k
    if size < 1:
        raise SystemExit(f"--parallel {k} is more than the {len(cpus)} CPUs this process may use")
    return [cpus[i * size : (i + 1) * size] for i in range(k)]


def evaluate(run_dir: Path, cpus: list[int], episodes: int) -> dict[str, float]:
    """``trainer eval`` of the run's final checkpoint on ``cpus``; the parsed figures (empty on failure)."""
    trainer = str(ROOT / "apps" / "trainer")
    cmd = [sys.executable, trainer, "eval", f"checkpoint={run_dir}", f"episodes={episodes}"]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=900, preexec_fn=lambda: os.sched_setaffinity(0, cpus),
    )  # fmt: skip
    match = _EVAL_LINE.search(proc.stdout)
    if match is None:
        tail = (proc.stdout + proc.stderr)[-400:]
        print(f"eval of {run_dir} failed ({proc.returncode}): {tail}", flush=True)
        return {}
    return {key: float(value) for key, value in match.groupdict().items()}


def _late_median(series: list[tuple[float, int, float]]) -> float:
    """Median of a scalar series after its first third of ticks (boot and compile); nan without ticks."""
    late = [value for _, _, value in series[len(series) // 3 :]]
    return statistics.median(late) if late else float("nan")


def run_job(job: Job, args: argparse.Namespace, cpus: list[int]) -> Row:
    """Train ``job`` on ``cpus`` for the time limit, evaluate it, and read its run folder."""
    overrides = [
        f"task={args.task}", *args.common, f"seed={job.seed}", f"algo.trainer.time_limit_s={args.time_limit}",
        *job.overrides,
    ]  # fmt: skip
    launched = launch_trainer(overrides, job.name, args.runs_root, cpus=cpus)
    row: Row = {"config": job.config, "seed": job.seed, "cpus": f"{cpus[0]}-{cpus[-1]}"}
    try:
        run = launched.wait(args.time_limit + args.boot_allowance)
    except RuntimeError as error:
        print(f"{job.name}: {error}", flush=True)
        return {**row, "error": "trainer failed"}
    figures = evaluate(run.run_dir, cpus, args.episodes)
    scalars = read_scalars(run.run_dir)
    returns = scalars.get("rollout/mean_return", [])
    reuse = scalars.get("async/reuse", [])
    updating = [wall for wall, _, v in scalars.get("perf/updates_per_s", []) if v > 0]
    switched = [wall for wall, _, v in scalars.get("perf/compiled", []) if v > 0]
    evals = [v for _, _, v in scalars.get("eval/return", [])]
    qf_max = scalars.get("train/qf_max", [])
    row.update(
        {
            "eval": figures.get("mean", float("nan")),
            "std": figures.get("std", float("nan")),
            "min": figures.get("min", float("nan")),
            "ep len": figures.get("len", float("nan")),
            "best eval": max(evals) if evals else float("nan"),
            "last eval": evals[-1] if evals else float("nan"),
            "train ret": returns[-1][2] if returns else float("nan"),
            # At the support's top (v_max, or normalized_v_max) the critics are clipped: Note [support watch].
            "qf_max": qf_max[-1][2] if qf_max else float("nan"),
            "env steps": returns[-1][1] if returns else 0,
            "reuse": reuse[-1][2] if reuse else float("nan"),
            "1st update s": updating[0] - launched.start_epoch if updating else float("nan"),
            "switch s": switched[0] - launched.start_epoch if switched else float("nan"),
            "wall s": run.wall_s,
            # The run's pace once started (medians over the last two thirds of the ticks): who waits.
            "env/s": _late_median(scalars.get("perf/env_steps_per_s", [])),
            "upd/s": _late_median(scalars.get("perf/updates_per_s", [])),
            "idle %": _late_median(scalars.get("perf/learner_idle_pct", [])),
            "step ms": _late_median(scalars.get("perf/collector_env_step_ms", [])),
        }
    )
    reach = (("rollout/mean_return", "train", args.reach), ("eval/return", "eval", args.reach_eval))
    for tag, name, target in reach:
        if target is not None:  # seconds from launch to the first tick at or above the target
            hits = [wall for wall, _, v in scalars.get(tag, []) if v >= target]
            row[f"{name}>={target:g} s"] = hits[0] - launched.start_epoch if hits else float("nan")
    if args.json is not None:  # every series, seconds from launch: the curves behind the row
        curves = {tag: [(wall - launched.start_epoch, step, value) for wall, step, value in series]
                  for tag, series in scalars.items()}  # fmt: skip
        path = Path(args.json).with_name(f"{Path(args.json).stem}.{job.name}.curves.json")
        # The workers' and the parent's logs (boot marks, warnings): small, and gone with the machine.
        # A second sweep into the same --json adds to it; a copy that fails costs the copy, not the row.
        try:
            path.write_text(json.dumps(curves))
            logs = path.with_name(f"{Path(args.json).stem}.{job.name}.logs")
            shutil.copytree(RunLayout(run.run_dir).logs, logs, dirs_exist_ok=True)
        except OSError as error:
            print(f"{job.name}: its curves or logs were not kept ({error})", flush=True)
    print(f"done {job.name}: {row}", flush=True)
    return row


def summary(rows: list[Row]) -> list[Row]:
    """Per configuration: runs, mean eval over seeds, lowest seed, mean env steps."""
    out: list[Row] = []
    for config in dict.fromkeys(str(r["config"]) for r in rows):
        evals = [float(r["eval"]) for r in rows if r["config"] == config and "eval" in r]  # type: ignore[arg-type]
        evals = [e for e in evals if e == e]
        steps = [float(r["env steps"]) for r in rows if r["config"] == config and "env steps" in r]  # type: ignore[arg-type]
        out.append(
            {
                "config": config,
                "runs": len(evals),
                "mean eval": statistics.fmean(evals) if evals else float("nan"),
                "lowest": min(evals) if evals else float("nan"),
                "env steps": statistics.fmean(steps) if steps else float("nan"),
            }
        )
    return out


def main() -> None:
    """Run the sweep and print its tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, help="task=<name> of every run")
    parser.add_argument("--config", action="append", required=True, help="NAME=OVERRIDES (repeatable)")
    parser.add_argument("--common", default="", help="overrides of every run, separated by spaces")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--parallel", type=int, default=4, help="runs at once, each on 1/K of the CPUs")
    parser.add_argument("--time-limit", type=float, default=150.0, help="seconds of training per run")
    parser.add_argument("--boot-allowance", type=float, default=150.0, help="seconds past the limit to exit")
    parser.add_argument("--reach", type=float, default=None, help="also: seconds to a training return R")
    parser.add_argument("--reach-eval", type=float, default=None, help="also: seconds to an in-run eval R")
    parser.add_argument("--episodes", type=int, default=10, help="eval episodes of each final checkpoint")
    parser.add_argument("--runs-root", type=Path, default=Path("/tmp/sweep_runs"))
    add_output_args(parser)
    args = parser.parse_args()
    args.common = args.common.split()
    configs = [parse_config(c) for c in args.config]
    jobs = [Job(name, overrides, seed) for seed in args.seeds for name, overrides in configs]
    taken = [job.name for job in jobs if (args.runs_root / job.name).exists()]
    if taken:  # the trainer refuses an existing run folder: say so now, not as a failed run later
        raise SystemExit(
            f"--runs-root {args.runs_root} already holds run folders named {', '.join(taken)} (an earlier "
            "sweep's); pass a new --runs-root, or remove those folders"
        )
    slots: queue.Queue[list[int]] = queue.Queue()
    for s in cpu_slices(sorted(os.sched_getaffinity(0)), min(args.parallel, len(jobs))):
        slots.put(s)
    facts = (f"task={args.task}", f"{args.time_limit:g} s a run", f"{slots.qsize()} at once")
    print(machine(*facts), flush=True)
    rows: list[Row] = []
    lock = threading.Lock()

    def worker(job: Job) -> None:
        cpus = slots.get()
        try:
            row = run_job(job, args, cpus)
        finally:
            slots.put(cpus)
        with lock:
            rows.append(row)

    threads = [threading.Thread(target=worker, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    order = {job.name: i for i, job in enumerate(jobs)}
    rows.sort(key=lambda r: order.get(f"{r['config']}_s{r['seed']}", 0))
    title = f"sweep: {args.task}, {args.time_limit:g} s of training, eval of the final checkpoint"
    report(title, rows, args.json)
    report("per configuration (seeds pooled)", summary(rows), args.json)


if __name__ == "__main__":
    main()
