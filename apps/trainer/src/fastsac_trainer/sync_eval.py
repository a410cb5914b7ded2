"""The synchronous trainer's evaluation: the library's :class:`~fastsac_async.Evaluator`, inline.

Between two iterations, when due, the agent's current actor and normalizer are copied into a
deterministic CPU policy and evaluated on envs of their own (Note [evaluation during training] in
``fastsac_async.evaluator.loop``); training waits meanwhile. That cost is real and shown: each
evaluation's seconds are reported, and the throughput of that reporting window includes them
(wiki/decisions.md, 2026-12-01, for why inline). The evaluator logs each report and a failed clip's
traceback to ``logs/trainer.log`` only, as an asynchronous run's does to its own log
(:data:`~fastsac_trainer.console.sinks.RUN_LOG_ONLY`); the console says each evaluation once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from fastsac_async import EvalSettings, Evaluator
from fastsac_core import FastSACAgent, InferencePolicy
from fastsac_trainer.plan import RunPlan
from fastsac_trainer.reporting import EvalPoint

__all__ = ["InlineEvaluation"]


class InlineEvaluation:
    """Evaluates the synchronous trainer's agent between iterations, as ``plan.run.evaluation`` says.

    Args:
        plan: The run (its evaluation settings, env factory and run folder).
        settings: ``plan.run.evaluation`` (not None).
        start_iteration: The iteration the run starts at (a resume's).
    """

    def __init__(self, plan: RunPlan, settings: EvalSettings, start_iteration: int) -> None:
        self._env_steps_per_iteration = plan.env_steps_per_iteration
        run = plan.run
        self._policy = InferencePolicy(run.dims, plan.agent, device="cpu", deterministic=True)
        self._evaluator = Evaluator(
            settings=settings, policy=self._policy, env_factory=run.env_factory, dims=run.dims,
            agent=plan.agent, best_path=run.layout.best_checkpoint,
            clip_file=run.layout.eval_clip, start_gstep=start_iteration,
        )  # fmt: skip

    def maybe_evaluate(
        self, iteration: int, agent: FastSACAgent, should_stop: Callable[[], bool]
    ) -> EvalPoint | None:
        """Evaluate the agent's current policy if due at ``iteration``; None if not due or stopped."""
        if not self._evaluator.due(iteration):
            return None
        self._policy.load_flat(agent.flatten_actor_params(), agent.policy_extras())
        with torch.random.fork_rng(devices=[]):  # the training's random stream is not the evaluation's
            report = self._evaluator.evaluate(gstep=iteration, should_stop=should_stop)
        if report is None:
            return None
        return EvalPoint(
            iteration=iteration, env_steps=iteration * self._env_steps_per_iteration,
            mean_return=report.mean_return, mean_length=report.mean_length,
            best_return=report.best_return, seconds=report.seconds,
            video=None if report.video is None else Path(report.video), video_error=report.video_error,
        )  # fmt: skip
