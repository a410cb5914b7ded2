"""Multi-learner synchronisation without a DDP wrapper: one flattened collective per model.

Every function is a no-op for a single process (``group`` world size 1 or no process group), runs
eagerly (never inside a compiled region), and works with gloo (CPU tensors) and NCCL (CUDA tensors).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import Tensor

if TYPE_CHECKING:
    from ._normalizer import EmpiricalNormalizer
    from ._reward_scale import RewardScale

__all__ = [
    "all_reduce_grads",
    "broadcast_tensors",
    "sync_normalizer_stats",
    "sync_reward_scale",
    "world_size_of",
]

ProcessGroup = dist.ProcessGroup


def world_size_of(group: ProcessGroup | None) -> int:
    """Ranks in ``group`` (1 when torch.distributed is not initialised)."""
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size(group)


def all_reduce_grads(params: Iterable[Tensor], group: ProcessGroup | None = None) -> None:
    """Average the gradients of ``params`` over ranks with ONE flattened all-reduce.

    A parameter without a gradient contributes zeros (and receives the average), so every rank
    reduces a vector of the same length even if a branch was unused on one of them.
    """
    world = world_size_of(group)
    if world == 1:
        return
    params = [p for p in params if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    flat.div_(world)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def broadcast_tensors(tensors: Sequence[Tensor], src: int = 0, group: ProcessGroup | None = None) -> None:
    """Copy ``tensors`` of rank ``src`` to every rank with one flattened broadcast (in place)."""
    if world_size_of(group) == 1 or not tensors:
        return
    with torch.no_grad():
        flat = torch.cat([t.detach().reshape(-1).to(torch.float64) for t in tensors])
        dist.broadcast(flat, src=dist.get_global_rank(group, src) if group is not None else src, group=group)
        offset = 0
        for t in tensors:
            t.copy_(flat[offset : offset + t.numel()].view_as(t))
            offset += t.numel()


def sync_normalizer_stats(
    normalizers: Sequence[EmpiricalNormalizer], group: ProcessGroup | None = None
) -> None:
    """Merge the pending statistics of ``normalizers`` over ranks with one float64 all-reduce.

    Afterwards every rank holds the same global statistics; see Note [normalizer statistics].
    """
    enabled = [n for n in normalizers if n.enabled]
    if not enabled:
        return
    if world_size_of(group) == 1:
        for n in enabled:
            n.merge_sufficient_stats(n.sufficient_stats().clone())
        return
    flat = torch.cat([n.sufficient_stats() for n in enabled])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    offset = 0
    for n in enabled:
        size = n.sufficient_stats().numel()
        n.merge_sufficient_stats(flat[offset : offset + size])
        offset += size


def sync_reward_scale(scale: RewardScale, group: ProcessGroup | None = None) -> None:
    """Merge the pending reward statistics over ranks (sums added, peaks maximised) with one all-reduce.

    Afterwards every rank holds the same scale (Note [reward scale]). The peak travels in its rank's own
    slot of a zero vector, so the one SUM all-reduce also carries every rank's peak.
    """
    if not scale.enabled:
        return
    stats, peak = scale.pending()
    world = world_size_of(group)
    if world == 1:
        scale.merge(stats.clone(), peak.clone())
        return
    peaks = torch.zeros(world, dtype=torch.float64, device=stats.device)
    peaks[dist.get_rank(group)] = peak
    flat = torch.cat([stats, peaks])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    scale.merge(flat[: stats.numel()], flat[stats.numel() :].max())
