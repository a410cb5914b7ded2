"""Running observation normalizer whose statistics merge exactly across ranks.

# Note [normalizer statistics]
# The global statistics are (count, mean, M2) in float64, identical on every rank. Between merges,
# each rank accumulates *shifted* sufficient statistics of the samples it saw:
#     n_d = number of rows, s1 = sum(x - mean), s2 = sum((x - mean)^2)
# shifted by the global mean (the same on every rank), which keeps s2 free of cancellation. These are
# additive, so an all-reduce (SUM) of the flat vector [n_d, s1, s2] is the statistics of the union of
# every rank's samples. Folding them in (Chan et al.'s parallel update, derived for shifted sums):
#     n' = n + n_d,  mean' = mean + s1 / n',  M2' = M2 + s2 - s1^2 / n'
# Every rank applies the same fold to the same numbers, so all ranks hold one global normalizer,
# equal (to float64 rounding) to a single normalizer fed the union. With n' = 0 nothing changes, so
# a zero count stays finite (mean 0, std 1 until the first sample).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = ["EmpiricalNormalizer", "merge_normalizers"]


class EmpiricalNormalizer(nn.Module):
    """Normalise ``x`` as ``(x - mean) / (std + eps)`` with running statistics.

    In a single process, ``forward(x, update=True)`` accumulates and folds at once. Across ranks,
    call ``accumulate`` on each rank, all-reduce ``sufficient_stats()`` and pass the sum to
    ``merge_sufficient_stats`` (see ``sync_normalizers``); see Note [normalizer statistics].

    Args:
        shape: Length of the feature axis.
        eps: Added to the standard deviation.
        enabled: When false the normalizer is the identity and never updates.
        device: Where the statistics live.
    """

    count: Tensor
    mean64: Tensor
    m2: Tensor
    delta: Tensor
    mean: Tensor
    std: Tensor

    def __init__(
        self,
        shape: int,
        eps: float = 1e-2,
        *,
        enabled: bool = True,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.dim = int(shape)
        self.eps = float(eps)
        self.enabled = enabled
        f64 = torch.float64
        self.register_buffer("count", torch.zeros((), dtype=f64, device=device))
        self.register_buffer("mean64", torch.zeros(self.dim, dtype=f64, device=device))
        self.register_buffer("m2", torch.zeros(self.dim, dtype=f64, device=device))
        self.register_buffer("delta", torch.zeros(1 + 2 * self.dim, dtype=f64, device=device))
        # float32 copies used by normalize(); recomputed at each merge.
        self.register_buffer("mean", torch.zeros(self.dim, device=device))
        self.register_buffer("std", torch.ones(self.dim, device=device))

    @torch.no_grad()
    def accumulate(self, x: Tensor) -> None:
        """Add the rows of ``x`` (``(B, dim)``) to the local, not yet merged statistics."""
        if not self.enabled:
            return
        shifted = x.to(torch.float64) - self.mean64
        self.delta[0] += x.shape[0]
        self.delta[1 : 1 + self.dim] += shifted.sum(0)
        self.delta[1 + self.dim :] += shifted.pow(2).sum(0)

    def sufficient_stats(self) -> Tensor:
        """Float64 ``[count, sum, sum of squares]`` (length ``1 + 2*dim``) accumulated since the last merge.

        Sums are of ``x - mean`` with the (rank-independent) global mean; see Note [normalizer statistics].
        """
        return self.delta

    @torch.no_grad()
    def merge_sufficient_stats(self, total: Tensor) -> None:
        """Fold summed statistics of every rank into the global ones and clear the local delta.

        Args:
            total: The element-wise sum over ranks of ``sufficient_stats()``.
        """
        total = total.to(device=self.delta.device, dtype=torch.float64)
        n_d, s1, s2 = total[0], total[1 : 1 + self.dim], total[1 + self.dim :]
        new_count = self.count + n_d
        safe = new_count.clamp(min=1.0)  # n' = 0 implies n_d = s1 = s2 = 0: nothing moves
        self.mean64.add_(s1 / safe)
        self.m2.add_(s2 - s1.pow(2) / safe)
        self.m2.clamp_(min=0.0)
        self.count.copy_(new_count)
        self.delta.zero_()
        self._refresh()

    def _refresh(self) -> None:
        var = torch.where(self.count > 0, self.m2 / self.count.clamp(min=1.0), torch.ones_like(self.m2))
        self.mean.copy_(self.mean64)
        self.std.copy_(var.sqrt())

    def normalize(self, x: Tensor) -> Tensor:
        """``(x - mean) / (std + eps)`` with the merged statistics (identity when disabled)."""
        if not self.enabled:
            return x
        return (x - self.mean) / (self.std + self.eps)

    def forward(self, x: Tensor, update: bool = False) -> Tensor:
        """Normalise ``x``; with ``update`` first fold ``x`` into the statistics (single-process use)."""
        if update and self.enabled:
            self.accumulate(x)
            self.merge_sufficient_stats(self.delta.clone())
        return self.normalize(x)


def merge_normalizers(normalizers: Sequence[EmpiricalNormalizer]) -> None:
    """Merge every normalizer's pending statistics into all of them (an in-process all-reduce).

    All normalizers must hold the same global statistics (as ranks do after each merge).
    """
    total = torch.stack([n.sufficient_stats() for n in normalizers]).sum(0)
    for n in normalizers:
        n.merge_sufficient_stats(total)
