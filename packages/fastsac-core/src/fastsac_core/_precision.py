"""Mixed precision of the update steps: autocast, fp16 loss scaling, and the optimizer step through them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = ["Precision"]


class Precision:
    """Autocast and (fp16) loss scaling of one agent's steps.

    Args:
        amp_dtype: Autocast dtype of the losses; None runs them in float32.
        loss_scaling: Scale fp16 losses with a ``GradScaler`` (and unscale before clipping).
        cache_casts: Let autocast cache weight casts; a captured step must not (the casts would be
            made during capture; Note [Whole-step graphs]).
    """

    def __init__(self, amp_dtype: torch.dtype | None, *, loss_scaling: bool, cache_casts: bool) -> None:
        self.amp_dtype = amp_dtype
        self.cache_casts = cache_casts
        self.scaler = torch.amp.GradScaler("cuda", enabled=loss_scaling)

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        """The context the losses run in."""
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast("cuda", dtype=self.amp_dtype, cache_enabled=self.cache_casts)

    def scaled(self, loss: Tensor) -> Tensor:
        """``loss`` as backward takes it (scaled when loss scaling is on)."""
        return self.scaler.scale(loss) if self.scaler.is_enabled() else loss

    def step(
        self, optimizers: Sequence[torch.optim.Optimizer], clip_params: Iterator[Tensor], max_grad_norm: float
    ) -> None:
        """Clip (when ``max_grad_norm > 0``) and step; through the GradScaler only when scaling is on."""
        scaling = self.scaler.is_enabled()
        if scaling:
            for optimizer in optimizers:
                self.scaler.unscale_(optimizer)
        if max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(clip_params, max_grad_norm)
        for optimizer in optimizers:
            if scaling:
                self.scaler.step(optimizer)
            else:
                optimizer.step()
        if scaling:
            self.scaler.update()

    def state_dict(self) -> dict[str, Any]:
        """The GradScaler's state (empty when scaling is off)."""
        return self.scaler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict`` (an empty one, saved without scaling, changes nothing)."""
        if state:
            self.scaler.load_state_dict(state)
