"""A sampled batch of n-step transitions, and the identity-aware map over its fields."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["Batch", "distinct_tensors"]


class Batch(NamedTuple):
    """A batch of n-step transitions (all tensors have the batch as first axis)."""

    obs: Tensor
    """(B, obs_dim) actor observation at the start of the transition."""
    critic_obs: Tensor
    """(B, critic_obs_dim) critic observation at the start."""
    actions: Tensor
    """(B, act_dim) action taken."""
    rewards: Tensor
    """(B,) discounted n-step reward sum."""
    next_obs: Tensor
    """(B, obs_dim) actor observation the return bootstraps from."""
    next_critic_obs: Tensor
    """(B, critic_obs_dim) critic observation the return bootstraps from."""
    bootstrap: Tensor
    """(B,) 1.0 unless the window ended in a terminal state."""
    discount: Tensor
    """(B,) gamma ** effective_n."""
    valid: Tensor
    """(B,) loss weight: 0.0 for transitions cut by a time limit on their first step."""

    def narrow(self, start: int, length: int) -> Batch:
        """Rows ``start .. start+length`` of every field (views, no copy)."""
        return self._map(lambda t: t.narrow(0, start, length))

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """Every field on ``device``."""
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def _map(self, fn: Callable[[Tensor], Tensor]) -> Batch:
        """``fn`` of every field, once per distinct tensor (a critic that observes obs stays obs)."""
        distinct, positions = distinct_tensors(self)
        mapped = [fn(t) for t in distinct]
        return Batch(*(mapped[k] for k in positions))


def distinct_tensors(tensors: Sequence[Tensor]) -> tuple[list[Tensor], list[int]]:
    """The distinct tensors of ``tensors`` (by identity, first-seen order) and each entry's index among them.

    Fields that are one tensor (``Batch.critic_obs is obs`` for a critic that observes obs) are
    handled once, and whatever is rebuilt from the distinct ones keeps them one tensor.
    """
    index: dict[int, int] = {}
    distinct: list[Tensor] = []
    positions: list[int] = []
    for tensor in tensors:
        if id(tensor) not in index:
            index[id(tensor)] = len(distinct)
            distinct.append(tensor)
        positions.append(index[id(tensor)])
    return distinct, positions
