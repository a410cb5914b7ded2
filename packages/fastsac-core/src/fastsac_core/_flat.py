"""Flat float32 views of parameter lists (weight transport between learners and collectors)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .exceptions import ConfigError

__all__ = ["flatten_into", "numel_of", "unflatten_into"]


def numel_of(params: Sequence[Tensor]) -> int:
    """Total element count."""
    return sum(p.numel() for p in params)


@torch.no_grad()
def flatten_into(params: Sequence[Tensor], out: Tensor | None = None) -> Tensor:
    """Concatenate ``params`` into a contiguous float32 vector (written into ``out`` when given)."""
    numel = numel_of(params)
    if out is None:
        out = torch.empty(numel, dtype=torch.float32, device=params[0].device)
    if out.numel() != numel or out.dtype != torch.float32 or not out.is_contiguous():
        raise ConfigError(
            f"flat output has {out.numel()} {out.dtype} elements (contiguous={out.is_contiguous()});"
            f" expected a contiguous float32 tensor of {numel}"
        )
    offset = 0
    for p in params:
        out[offset : offset + p.numel()].copy_(p.reshape(-1), non_blocking=True)
        offset += p.numel()
    return out


@torch.no_grad()
def unflatten_into(params: Sequence[Tensor], flat: Tensor) -> None:
    """Copy a vector made by ``flatten_into`` back into ``params`` (in place)."""
    numel = numel_of(params)
    if flat.numel() != numel:
        raise ConfigError(
            f"flat parameter vector has {flat.numel()} elements; this network has {numel}"
            " (was it built with the same dims and hidden sizes?)"
        )
    offset = 0
    for p in params:
        p.copy_(flat[offset : offset + p.numel()].view_as(p), non_blocking=True)
        offset += p.numel()
