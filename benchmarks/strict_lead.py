"""How the collectors' lead in strict mode changes learning per env step: async against sync, per seed.

For each seed, the synchronous trainer and the asynchronous one (CPU, 1 collector, 1 learner, no
evaluator, strict mode) run ``--task`` to ``--iterations`` with a checkpoint every ``--every``
iterations; the asynchronous one once per ``--lead`` (``async_options.max_lead``: a number, or
``null`` for the ring as the only bound). Each checkpoint's deterministic policy is evaluated on
``--episodes`` fresh episodes. Runs go one at a time, in one process.

    uv run --frozen python benchmarks/strict_lead.py [--seeds 1 2 3] [--lead null 4 2] [--iterations 400]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _harness import add_output_args, machine, report

from fastsac_trainer.api import train
from fastsac_trainer.testing import ASYNC_CPU_QUIET, checkpoint_return

SYNC = ["algo.trainer.asynchronous=false", "algo.trainer.device=cpu", "algo.trainer.eval_interval_s=null",
        "algo.trainer.logging_interval=100", "console=plain"]  # fmt: skip


def _returns(task: str, run_dir: Path, episodes: int) -> dict[int, float]:
    """Each checkpoint's deterministic return, by iteration."""
    from fastsac_async import RunLayout, checkpoint_step

    steps = {
        step: path for path in RunLayout(run_dir).checkpoints.iterdir() if (step := checkpoint_step(path))
    }
    return {step: checkpoint_return(steps[step], task, episodes) for step in sorted(steps)}


def main() -> None:
    """Run every seed's sync run and async runs; print each final return and the means."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="pendulum")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument(
        "--lead", nargs="+", default=["null", "4", "2"], help="max_lead values (null: the ring)"
    )
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--set", action="append", default=[], help="an override of every run")
    add_output_args(parser)
    args = parser.parse_args()
    print(machine())
    started = time.perf_counter()
    runs = {"sync": SYNC, **{f"lead {lead}": [*ASYNC_CPU_QUIET, f"algo.trainer.async_options.max_lead={lead}"]
                             for lead in args.lead}}  # fmt: skip
    finals: dict[str, list[float]] = {name: [] for name in runs}
    with tempfile.TemporaryDirectory() as folder:
        for seed in args.seeds:
            for name, settings in runs.items():
                own = f"run_name={name.replace(' ', '')}_{seed}"
                over = [*settings, *args.set, f"runs_root={folder}", own, f"seed={seed}",
                        f"algo.trainer.num_learning_iterations={args.iterations}",
                        f"algo.trainer.save_interval={args.every}"]  # fmt: skip
                result = train(args.task, overrides=over)
                got = _returns(args.task, result.run_dir, args.episodes)
                finals[name].append(got[max(got)])
                print(
                    f"seed {seed} {name}: " + ", ".join(f"{k}: {v:.1f}" for k, v in got.items()), flush=True
                )
    rows = [{"run": name, **{f"seed {s}": v for s, v in zip(args.seeds, values, strict=True)},
             "mean": statistics.mean(values)} for name, values in finals.items()]  # fmt: skip
    report(f"{args.task}: final deterministic return at {args.iterations} iterations "
           f"({time.perf_counter() - started:.0f} s)", rows, args.json)  # fmt: skip


if __name__ == "__main__":
    main()
