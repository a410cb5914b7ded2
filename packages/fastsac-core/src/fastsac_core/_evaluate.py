"""The deterministic episode return: one definition for ``trainer eval`` and evaluation during training.

A policy (an :class:`~fastsac_core.InferencePolicy` built with ``deterministic=True``: the squashed
mean action) runs ``episodes`` episodes on envs of its own, made by the factory in batches of at most
:data:`MAX_PARALLEL_ENVS`; batch ``k`` is built and reset with seed ``seed + (envs before it)``. Each
env counts its first episode only (undiscounted return, length in steps), so the same policy, factory,
episode count and seed always give the same returns. An exception the env's own ``reset`` or ``step``
raises leaves as one :class:`~fastsac_core.EnvCallError` line (the env, the exception, where).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ._env_checks import EnvCall
from ._inference import InferencePolicy
from .env import EnvFactory

__all__ = ["MAX_PARALLEL_ENVS", "EvalResult", "evaluate_policy"]

MAX_PARALLEL_ENVS = 32
"""Most envs one batch of evaluation episodes steps together."""


@dataclass(frozen=True)
class EvalResult:
    """Returns of the evaluated episodes."""

    returns: tuple[float, ...]
    """Undiscounted return of each episode."""
    lengths: tuple[int, ...]
    """Length of each episode, in env steps."""

    @property
    def mean_return(self) -> float:
        """Mean of the returns."""
        return float(np.mean(self.returns))

    @property
    def mean_length(self) -> float:
        """Mean of the episode lengths."""
        return float(np.mean(self.lengths))


def evaluate_policy(
    policy: InferencePolicy,
    factory: EnvFactory,
    episodes: int,
    seed: int,
    should_stop: Callable[[], bool] = lambda: False,
) -> EvalResult | None:
    """Run ``episodes`` episodes of ``policy`` (each env counts its first episode); None if stopped.

    Args:
        policy: The policy (deterministic for an evaluation).
        factory: Makes the envs, ``factory(num_envs, seed)``.
        episodes: Episodes to run (at least 1).
        seed: Seed of the first batch of envs (the next batch gets ``seed + its first env index``).
        should_stop: Polled every env step; True abandons the evaluation (returns None).

    Raises:
        EnvCallError: The env's own ``reset`` or ``step`` raised (it is the cause).
    """
    returns: list[float] = []
    lengths: list[int] = []
    batch_seed = seed
    while len(returns) < episodes:
        n = min(episodes - len(returns), MAX_PARALLEL_ENVS)
        env = factory(n, batch_seed)
        stepping = EnvCall(env, "step")
        try:
            with EnvCall(env, "reset"):
                obs, _ = env.reset(seed=batch_seed)
            running = np.zeros(n, dtype=np.float64)
            steps = np.zeros(n, dtype=np.int64)
            done = np.zeros(n, dtype=bool)
            while not done.all():
                if should_stop():
                    return None
                actions = policy(torch.from_numpy(obs)).cpu().numpy()
                with stepping:
                    result = env.step(actions)
                live = ~done
                running[live] += result.rewards[live]
                steps[live] += 1
                done |= result.terminated | result.truncated
                obs = result.obs
        finally:
            env.close()
        returns += running.tolist()
        lengths += steps.tolist()
        batch_seed += n
    return EvalResult(tuple(returns), tuple(lengths))
