"""Return against wall-clock (and env steps) of a finished run, read from its TensorBoard events.

    uv run --frozen python benchmarks/return_curve.py runs/<run> [--start-epoch EPOCH] [--every 30]

Seconds count from the launch, start-up included: the run's first launch as its config events record
it, or ``--start-epoch`` (a Unix time) given for it; a run whose events hold no config counts from its
first event. Event steps are env steps (the trainer's TensorBoard axis; the iteration is
the ``progress/iteration`` scalar); ``--num-envs N`` reads an older run whose steps were iterations.
Prints a table: seconds, iteration, env steps, rollout/mean_return, env steps/s, and
the learner's updates/s and learn_pct at the same logging tick; then the medians of those two over the
run after its first minute (compile and warm-up excluded), with the learner's host-time shares
(``perf/learner_<stage>_pct``), the collectors' back-pressure share (``perf/collector_wait_pct``) and
their mean ms per stage occurrence (``perf/collector_<stage>_ms``: env_step, inference, push, ...)
where the run logged them.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from _harness import launch_epoch, read_scalars


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--start-epoch", type=float, default=None)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between printed rows")
    parser.add_argument(
        "--num-envs", type=int, default=None, help="an older run keyed by iteration: env steps = step * N"
    )
    args = parser.parse_args()
    series = read_scalars(args.run_dir)
    returns = series.get("rollout/mean_return", [])
    rates = {step: v for _, step, v in series.get("perf/env_steps_per_s", [])}
    updates = {step: v for _, step, v in series.get("perf/updates_per_s", [])}
    learn = {step: v for _, step, v in series.get("perf/learn_pct", [])}
    iterations = {step: int(v) for _, step, v in series.get("progress/iteration", [])}
    if not returns:
        print("no rollout/mean_return events")
        return
    start = args.start_epoch if args.start_epoch is not None else launch_epoch(args.run_dir)
    print(
        f"{'seconds':>8} {'iteration':>9} {'env steps':>10} {'mean return':>11} {'env steps/s':>11}"
        f" {'updates/s':>9} {'learn %':>7}"
    )
    next_row = 0.0
    best = max(v for _, _, v in returns)
    for wall, step, value in returns:
        t = wall - start
        if t >= next_row or (wall, step, value) == returns[-1]:
            steps = step * args.num_envs if args.num_envs else step
            iteration = step if args.num_envs else iterations.get(step, "?")
            nan = float("nan")
            print(
                f"{t:>8.0f} {iteration:>9} {steps:>10} {value:>11.1f} {rates.get(step, nan):>11.0f}"
                f" {updates.get(step, nan):>9.1f} {learn.get(step, nan):>7.1f}"
            )
            next_row = t + args.every
    print(f"best mean return {best:.1f}; last {returns[-1][2]:.1f} at {returns[-1][0] - start:.0f} s")
    shares = sorted(tag for tag in series if tag.startswith("perf/learner_") and tag.endswith("_pct"))
    shares += [tag for tag in ("perf/collector_wait_pct",) if tag in series]
    shares += sorted(tag for tag in series if tag.startswith("perf/collector_") and tag.endswith("_ms"))
    for tag in ("perf/updates_per_s", "perf/learn_pct", *shares):
        late = [v for wall, _, v in series.get(tag, []) if wall - start >= 60.0]
        if late:
            print(f"{tag}: median {statistics.median(late):.2f} over {len(late)} ticks after 60 s")


if __name__ == "__main__":
    main()
