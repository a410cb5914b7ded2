"""The n-step window of sampled start steps (Note [replay layout] in ``_replay``)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["Window", "nstep_window"]


class Window(NamedTuple):
    """The n-step returns of ``(batch_per_env, num_envs)`` start steps."""

    rewards: Tensor
    """sum_i gamma^i r_{s+i} over the window."""
    terminated: Tensor
    """The window ended with a terminal step (no bootstrap)."""
    valid: Tensor
    """The start step was not cut by a time limit."""
    length: Tensor
    """m, the steps in the window (the return bootstraps from the obs of step s+m)."""


def _any_before(stop: Tensor) -> Tensor:
    """``out[..., k] = stop[..., :k].any(-1)`` along the window (its n is small: a few elementwise ops).

    Not a ``cumsum``: a CUDA scan kernel per sampled batch for what n = 1 needs no work for
    (wiki/benchmarks.md, Learner, "Inside a run").
    """
    before = torch.zeros_like(stop)
    for k in range(1, stop.shape[-1]):
        before[..., k] = before[..., k - 1] | stop[..., k - 1]
    return before


def nstep_window(
    step: Tensor,
    newest: int | Tensor,
    env: Tensor,
    *,
    terminated: Tensor,
    truncated: Tensor,
    rewards: Tensor,
    powers: Tensor,
    discounts: Tensor,
) -> Window:
    """The windows from chronological ``step`` of ``env`` (both ``(batch_per_env, num_envs)``).

    Args:
        step: Start steps, each complete (``step <= newest - 2``).
        newest: Steps written per env (a scalar, or ``(1, num_envs, 1)``).
        env: The env of each start step.
        terminated: ``(capacity, num_envs)`` stored flags.
        truncated: ``(capacity, num_envs)`` stored flags.
        rewards: ``(capacity, num_envs)`` stored rewards.
        powers: ``arange(n_steps)``.
        discounts: ``gamma ** powers`` (float32).
    """
    cap = terminated.shape[0]
    # Window of up to n steps: (batch_per_env, num_envs, n_steps).
    window = step.unsqueeze(-1) + powers
    slots = window % cap
    env3 = env.unsqueeze(-1).expand_as(slots)
    available = window <= newest - 2
    done = terminated[slots, env3] & available
    cut = truncated[slots, env3] & ~terminated[slots, env3] & available
    stop = done | cut
    stopped_before = _any_before(stop)
    later = powers > 0
    include = available & ~stopped_before & ~(cut & later)
    # where(), not a product: steps outside the window may hold NaN sentinels.
    summed = torch.where(include, rewards[slots, env3] * discounts, 0.0).sum(-1)
    return Window(
        rewards=summed,
        terminated=(done & include).any(-1),
        valid=~cut[..., 0],
        length=include.sum(-1),
    )
