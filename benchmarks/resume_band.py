"""Is an asynchronous resume faithful? Uninterrupted runs against runs stopped and resumed, per seed.

For each seed, one asynchronous ``pendulum`` run (CPU, 1 collector, 1 learner, the task's settings, no
evaluator) goes to ``--end`` iterations without a stop; another stops at ``--stop`` (its budget) and
resumes from its run folder to ``--end``, replay buffer included (``--resume-override
algo.trainer.save_replay=false`` resumes from an empty buffer instead). Each final checkpoint's
deterministic policy is evaluated on 16 fresh episodes (return of 200 at most). Runs go one at a time.

    uv run --frozen python benchmarks/resume_band.py [--seeds 1 2 3] [--stop 300] [--end 500]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _harness import add_output_args, machine, report

from fastsac_trainer.api import train
from fastsac_trainer.evaluate import evaluate, load_policy
from fastsac_trainer.tasks import get_task

COMMON = [
    "algo.trainer.asynchronous=true",
    "algo.trainer.device=cpu",
    "algo.trainer.eval_interval_s=null",
    "algo.trainer.save_interval=100000",
    "algo.trainer.logging_interval=100",
    "console=plain",
]


def _eval(checkpoint: Path | None) -> float:
    assert checkpoint is not None
    policy, _ = load_policy(checkpoint)
    return evaluate(policy, get_task("pendulum").env_factory(), 16, 10_000).mean_return


def main() -> None:
    """Run every seed's pair of runs and print one row per seed and a summary row."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--stop", type=int, default=300)
    parser.add_argument("--end", type=int, default=500)
    parser.add_argument("--resume-override", action="append", default=[], help="added to each resume")
    add_output_args(parser)
    args = parser.parse_args()
    print(machine())
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        runs = [f"runs_root={root}"]
        for seed in args.seeds:
            budget = "algo.trainer.num_learning_iterations="
            own = [*COMMON, *runs, f"seed={seed}"]
            whole = train("pendulum", overrides=[*own, f"run_name=whole{seed}", f"{budget}{args.end}"])
            first = train("pendulum", overrides=[*own, f"run_name=s{seed}", f"{budget}{args.stop}"])
            resume = [f"resume={Path(root) / f's{seed}'}", *args.resume_override, f"{budget}{args.end}"]
            again = train("pendulum", overrides=resume)
            rows.append({
                "seed": seed,
                f"uninterrupted@{args.end}": _eval(whole.last_checkpoint),
                f"stopped@{args.stop}": _eval(first.last_checkpoint),
                f"resumed@{args.end}": _eval(again.last_checkpoint),
            })  # fmt: skip
    summary: dict[str, object] = {"seed": "mean"}
    for key in list(rows[0])[1:]:
        summary[key] = statistics.mean(float(row[key]) for row in rows)
    summary["wall_s"] = time.perf_counter() - started
    resumes = " ".join(args.resume_override) or "with the replay buffer"
    report(
        f"async pendulum: stopped at {args.stop}, resumed ({resumes}) to {args.end}",
        [*rows, summary],
        args.json,
    )


if __name__ == "__main__":
    main()
