"""Is an asynchronous resume faithful? Uninterrupted runs against runs stopped and resumed, per seed.

For each seed, one asynchronous run (CPU, 1 collector, 1 learner, the task's settings and ``--set``'s
overrides, no evaluator, the ring as the collectors' only bound: ``testing.ASYNC_BAND_RUN``) goes to
``--end`` iterations without a stop; another stops at ``--stop`` (its
budget) and is resumed from its run folder to ``--end`` with its replay buffer and, with ``--empty``,
once more from the same folder with ``algo.trainer.save_replay=false`` (an empty buffer: the variant a
faithful resume must be told apart from). Each resume writes into a folder of its own. Each final
checkpoint's deterministic policy is evaluated on ``--episodes`` fresh episodes. Runs go one at a time,
in one process (the workers' fork server is started once). The band is the uninterrupted returns'
``[min - margin, max + margin]`` (``--margin``, in return units), or ``[min - margin, BEST]`` with
``--best BEST`` (the task's best return: a resume ahead of the uninterrupted runs is no fault).

    uv run --frozen python benchmarks/resume_band.py [--seeds 1 2 3] [--stop 300] [--end 500] [--empty]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _harness import add_output_args, machine, report

from fastsac_trainer.api import train
from fastsac_trainer.testing import ASYNC_BAND_RUN, checkpoint_return

COMMON = list(ASYNC_BAND_RUN)
BUDGET = "algo.trainer.num_learning_iterations="


def _eval(task: str, checkpoint: Path | None, episodes: int) -> float:
    assert checkpoint is not None
    return checkpoint_return(checkpoint, task, episodes)


def main() -> None:
    """Run every seed's runs and print one row per seed, a summary row and the band's verdicts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="pendulum")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--stop", type=int, default=300)
    parser.add_argument("--end", type=int, default=500)
    parser.add_argument("--set", action="append", default=[], help="an override of every run")
    parser.add_argument("--empty", action="store_true", help="also resume each stop from an empty buffer")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--margin", type=float, default=10.0)
    parser.add_argument("--best", type=float, default=None, help="the band's upper edge: the task's best")
    add_output_args(parser)
    args = parser.parse_args()
    print(machine())
    variants = {"resumed": [], **({"empty": ["algo.trainer.save_replay=false"]} if args.empty else {})}
    returns: dict[int, dict[str, float]] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        for seed in args.seeds:
            own = [*COMMON, *args.set, f"runs_root={root}", f"seed={seed}"]
            got = returns[seed] = {}
            whole = train(args.task, overrides=[*own, f"run_name=whole{seed}", f"{BUDGET}{args.end}"])
            got[f"uninterrupted@{args.end}"] = _eval(args.task, whole.last_checkpoint, args.episodes)
            first = train(args.task, overrides=[*own, f"run_name=stop{seed}", f"{BUDGET}{args.stop}"])
            got[f"stopped@{args.stop}"] = _eval(args.task, first.last_checkpoint, args.episodes)
            for name, extra in variants.items():
                resume = [f"resume={first.run_dir}", f"runs_root={root}", f"run_name={name}{seed}", *extra]
                again = train(args.task, overrides=[*resume, f"{BUDGET}{args.end}"])
                got[f"{name}@{args.end}"] = _eval(args.task, again.last_checkpoint, args.episodes)
            print(f"seed {seed}: {got}", flush=True)
    wall = time.perf_counter() - started
    columns = list(returns[args.seeds[0]])
    uninterrupted = [got[columns[0]] for got in returns.values()]
    low = min(uninterrupted) - args.margin
    high = max(uninterrupted) + args.margin if args.best is None else args.best
    rows: list[dict[str, object]] = [{"seed": seed, **got} for seed, got in returns.items()]
    rows.append({"seed": "mean", **{c: statistics.mean(g[c] for g in returns.values()) for c in columns}})
    rows[-1]["wall_s"] = wall
    verdict: dict[str, object] = {"seed": f"in [{low:.1f}, {high:.1f}]"}
    for name in variants:
        inside = [low <= got[f"{name}@{args.end}"] <= high for got in returns.values()]
        verdict[f"{name}@{args.end}"] = f"{sum(inside)}/{len(inside)}"
    settings = " ".join(args.set) or "the task's settings"
    report(
        f"async {args.task} ({settings}): stopped at {args.stop}, resumed to {args.end}",
        [*rows, verdict],
        args.json,
    )


if __name__ == "__main__":
    main()
