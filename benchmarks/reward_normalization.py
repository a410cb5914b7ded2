"""Reward normalisation on ``task=gym``: the same env with its rewards x1 and x100, normalised or not.

InvertedPendulum-v5 (200-step episodes) through ``task=gym`` with the generic recipe (``GYM_TASK``),
its rewards multiplied by ``--factors`` in a registered ``TransformReward`` wrapper, each seed trained
with ``algo.agent.reward_normalization`` false and true; the final checkpoint's deterministic policy
is evaluated on 16 fresh envs (mean return divided by the factor: 200 is the maximum). CPU-sized as
``apps/trainer/tests/test_gym_learning.py`` is (networks 64/128, batch 256, 8 envs x 4 updates).

    uv run --frozen python benchmarks/reward_normalization.py                       # 2 seeds, x1 and x100
    uv run --frozen python benchmarks/reward_normalization.py --seeds 1 2 3 --iterations 500
    uv run --frozen python benchmarks/reward_normalization.py --factors 1 --normalised on algo.agent.tau=0.05

A GPU side-by-side of the built-in tasks is ``benchmarks/headline.sh`` with
``algo.agent.reward_normalization=true`` on one side.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from _harness import machine, report

SCALED_ENV = '''
"""InvertedPendulum-v5 with its rewards multiplied by ``factor`` (a registered reward wrapper)."""

import gymnasium as gym
from gymnasium.wrappers import TransformReward


def make(factor: float = 1.0, **kwargs):
    return TransformReward(gym.make("InvertedPendulum-v5", **kwargs), lambda r: factor * r)


gym.register("ScaledInvertedPendulum-v0", entry_point=make)
'''

CPU_SIZED = [
    "algo.agent.actor_hidden_dim=64",
    "algo.agent.critic_hidden_dim=128",
    "algo.agent.batch_size=256",
    "algo.agent.num_updates=4",
    "task.num_envs=8",
    "task.max_episode_steps=200",
    "algo.trainer.asynchronous=false",
    "algo.trainer.device=cpu",
    "console=plain",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--factors", type=float, nargs="+", default=[1.0, 100.0])
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--normalised", choices=["both", "on", "off"], default="both")
    parser.add_argument(
        "overrides", nargs="*", help="more trainer overrides, e.g. algo.agent.alpha_init=0.001"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(machine())
    from fastsac_trainer import train
    from fastsac_trainer.evaluate import evaluate, load_policy
    from fastsac_trainer.tasks import env_factory_for

    folder = Path(tempfile.mkdtemp(prefix="reward-norm-"))
    (folder / "scaled_pendulum.py").write_text(SCALED_ENV, encoding="utf-8")
    sys.path.insert(0, str(folder))
    rows = []
    for factor in args.factors:
        task = {"name": "gym", "env_id": "ScaledInvertedPendulum-v0", "env_import": "scaled_pendulum",
                "env_kwargs": {"factor": factor}, "max_episode_steps": 200}  # fmt: skip
        for normalise in {"both": (False, True), "on": (True,), "off": (False,)}[args.normalised]:
            for seed in args.seeds:
                start = time.perf_counter()
                result = train(
                    "gym",
                    env_id="ScaledInvertedPendulum-v0",
                    env_import="scaled_pendulum",
                    env_kwargs={"factor": factor},
                    overrides=[
                        *CPU_SIZED,
                        f"algo.agent.reward_normalization={str(normalise).lower()}",
                        f"algo.trainer.num_learning_iterations={args.iterations}",
                        f"runs_root={folder / 'runs'}",
                        f"seed={seed}",
                        *args.overrides,
                    ],
                )
                assert result.last_checkpoint is not None
                policy, _ = load_policy(result.last_checkpoint)
                learned = evaluate(policy, env_factory_for(task), 16, seed=10_000)
                rows.append(
                    {
                        "reward x": f"{factor:g}",
                        "normalised": normalise,
                        "seed": seed,
                        "eval return / x (max 200)": learned.mean_return / factor,
                        "qf_max": float(result.metrics.get("train/qf_max", float("nan"))),
                        "reward_scale": float(result.metrics.get("train/reward_scale", float("nan"))),
                        "s": time.perf_counter() - start,
                    }
                )
                print(rows[-1], flush=True)
    report("reward normalisation on task=gym, InvertedPendulum-v5 (200 steps), rewards scaled", rows)


if __name__ == "__main__":
    main()
