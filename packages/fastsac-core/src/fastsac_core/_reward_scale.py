"""Reward normalisation: one running scale of the rewards, so that the critic's support is fixed.

# Note [reward scale]
# The standard scheme (SimbaV2's reward scaling; FastTD3 uses the same): every env keeps its
# discounted return so far, G_t = r_t + gamma * G_{t-1}, reset to 0 after an episode ends (terminated
# or truncated). Over all G_t seen, we keep the running variance and the largest |G_t|. Rewards are
# multiplied by
#     scale = 1 / max(std(G), max|G| / return_bound, 1e-8)
# so that the scaled returns have a spread of about 1 and every one seen so far lies within
# ±return_bound (= normalized_v_max / 2). The critics' support is then fixed at ±normalized_v_max,
# whatever the env pays per step: twice the bound, because a value bootstraps past a time limit that
# cuts G short (with 50-step episodes at gamma 0.99, V = 100 r while G never exceeds 39.5 r), the
# entropy term folded into the targets shifts values, and a policy that improves earns returns above
# the largest seen until the scale catches up. wiki/tasks.md, "Value supports", has the reasoning.
#
# Where: the learner, in the replay buffer, from raw rewards. ``ReplayBuffer`` calls ``observe`` with
# every step it stores, in each env's order (so the statistics see each transition exactly once, as
# the env produced it, under ragged ingest too), and stores the rewards raw. ``FastSACAgent.prepare``
# multiplies the sampled rewards by the scale of the moment. A sampled n-step reward is
# sum_i gamma^i r_{s+i}; scaling is linear, so scaling the sum equals summing scaled rewards: n-step
# returns stay exact, and every row of a batch has the same scale however old its transition is.
# Scaling on the collectors instead would store each transition at the scale of its collection time
# and give every collector its own statistics. The statistics are additive (count, shifted sums, as
# ``EmpiricalNormalizer``'s) and the peak merges by a maximum, so ranks merge them into one scale
# (``sync_reward_scale``): every rank trains on the same targets.
#
# A checkpoint holds the statistics and the peak (``state_dict``); the per-env returns are not kept:
# a resumed run starts new episodes. A checkpoint written before reward normalisation existed has
# none, and the scale starts afresh; it was trained without normalisation, so it loads only into an
# agent without it (``load_checkpoint`` refuses another value support: its critics' atoms are raw).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ._normalizer import EmpiricalNormalizer

__all__ = ["RewardScale"]

_EPS = 1e-8


class RewardScale(nn.Module):
    """The running reward scale of Note [reward scale] (disabled: the scale stays 1 and nothing is kept).

    Args:
        num_envs: Envs whose returns are tracked.
        gamma: Discount of the returns.
        return_bound: The largest scaled |discounted return| seen so far.
        enabled: When false, ``observe`` does nothing and ``scale`` is 1.
        device: Where the statistics live (the replay buffer's device).
    """

    running: Tensor
    peak: Tensor
    pending_peak: Tensor
    scale: Tensor

    def __init__(
        self,
        num_envs: int,
        gamma: float,
        return_bound: float,
        *,
        enabled: bool,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.enabled = enabled
        self.gamma = float(gamma)
        self.return_bound = float(return_bound)
        f64 = torch.float64
        self.returns = EmpiricalNormalizer(1, eps=0.0, enabled=enabled, device=device)
        """Running count, mean and M2 of every G seen (merged over ranks like the obs normalizer)."""
        # Each env's return so far; not in a checkpoint (a resumed run starts new episodes).
        self.register_buffer("running", torch.zeros(num_envs, dtype=f64, device=device), persistent=False)
        self.register_buffer("peak", torch.zeros((), dtype=f64, device=device))
        self.register_buffer("pending_peak", torch.zeros((), dtype=f64, device=device))
        self.register_buffer("scale", torch.ones((), device=device))

    @torch.no_grad()
    def observe(self, rewards: Tensor, ended: Tensor, columns: slice | None = None) -> None:
        """Fold k consecutive steps of the envs ``columns`` (None: all) into the pending statistics.

        Args:
            rewards: ``(k, width)`` raw rewards, in step order.
            ended: ``(k, width)`` the step ended its episode (terminated or truncated).
            columns: The envs' columns among ``num_envs``.
        """
        if not self.enabled:
            return
        g = self.running if columns is None else self.running[columns]  # a view: updated in place
        returns = torch.empty(rewards.shape, dtype=torch.float64, device=g.device)
        for t in range(rewards.shape[0]):  # sequential in time, vectorised over envs
            g.mul_(self.gamma).add_(rewards[t])
            returns[t] = g
            g.masked_fill_(ended[t], 0.0)
        self.returns.accumulate(returns.reshape(-1, 1))
        torch.maximum(self.pending_peak, returns.abs().max(), out=self.pending_peak)

    def pending(self) -> tuple[Tensor, Tensor]:
        """The statistics observed since the last merge: float64 ``[count, sum, sum of squares]`` and peak."""
        return self.returns.sufficient_stats(), self.pending_peak

    @torch.no_grad()
    def merge(self, stats: Tensor, peak: Tensor) -> None:
        """Fold every rank's pending statistics (summed) and peak (their maximum) in; refresh the scale."""
        if not self.enabled:
            return
        self.returns.merge_sufficient_stats(stats)
        torch.maximum(self.peak, peak.to(self.peak.device, torch.float64), out=self.peak)
        self.pending_peak.zero_()
        self._refresh()

    def _refresh(self) -> None:
        std = self.returns.m2.sum() / self.returns.count.clamp(min=1.0)
        denominator = torch.maximum(std.sqrt(), self.peak / self.return_bound).clamp(min=_EPS)
        scale = torch.where(self.returns.count > 0, 1.0 / denominator, torch.ones_like(denominator))
        self.scale.copy_(scale)

    @torch.no_grad()
    def reset(self) -> None:
        """Forget everything: no statistics, scale 1, each env's return 0."""
        for name in ("count", "mean64", "m2", "delta", "mean"):
            getattr(self.returns, name).zero_()
        self.returns.std.fill_(1.0)
        for tensor in (self.running, self.peak, self.pending_peak):
            tensor.zero_()
        self.scale.fill_(1.0)

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """Restore the statistics, the peak and the scale; each env's return starts at 0 (new episodes)."""
        result = super().load_state_dict(state, strict=strict, assign=assign)
        self.running.zero_()
        return result
