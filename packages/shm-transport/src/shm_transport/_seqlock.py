"""What both weight readers share of the seqlock (Note [Weight channel seqlock] in ``_weight_channel``).

A reader's version bookkeeping and overwrite check, and the size check of a snapshot. It needs the channel
only as a type, so the modules above it import without a circle: ``_weight_channel`` imports
``_host_weights`` (``WeightChannelHandle.open_reader`` builds a ``HostWeightReader``), and
``_host_weights`` and ``_ipc_weights`` import this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from shm_transport._layout import FieldSpec, casts_safely, describe
from shm_transport.exceptions import RingLayoutError

if TYPE_CHECKING:
    from shm_transport._weight_channel import WeightChannel

__all__ = ["PARAMS_DTYPE", "SeqlockVersions", "check_snapshot"]

PARAMS_DTYPE = torch.float32
"""The dtype of a weight channel's flat parameter vector (its slots, host or device)."""


def check_snapshot(
    num_params: int,
    extras: Mapping[str, FieldSpec],
    flat_params: Tensor,
    given: Mapping[str, Tensor],
    *,
    into: bool = False,
) -> None:
    """Raise ``RingLayoutError`` unless ``flat_params``/``given`` match the channel.

    That is its sizes, and dtypes that cast without changing kind (``casts_safely``) to the channel's
    (a publish's sources) or, with ``into``, from the channel's (a poll's destinations).
    """
    tensors = {"flat params": flat_params, **given}
    if not all(isinstance(t, Tensor) for t in tensors.values()):
        types = {name: describe(t) for name, t in tensors.items()}
        raise RingLayoutError(f"the weight channel takes tensors, got {types}")
    if flat_params.dim() != 1 or flat_params.numel() != num_params:
        raise RingLayoutError(
            f"flat params have shape {tuple(flat_params.shape)}, the weight channel needs ({num_params},); "
            "flatten the actor (e.g. torch.nn.utils.parameters_to_vector)"
        )
    shapes = {name: tuple(tensor.shape) for name, tensor in given.items()}
    wanted = {name: spec.shape for name, spec in extras.items()}
    if shapes != wanted:
        raise RingLayoutError(f"weight extras have shapes {shapes}, the channel was created with {wanted}")
    dtypes = {"flat params": PARAMS_DTYPE, **{name: spec.dtype for name, spec in extras.items()}}

    def fits(mine: torch.dtype, channels: torch.dtype) -> bool:
        return casts_safely(channels, mine) if into else casts_safely(mine, channels)

    pairs = ", ".join(
        f"{name}: {tensor.dtype} against the channel's {dtypes[name]}"
        for name, tensor in tensors.items()
        if not fits(tensor.dtype, dtypes[name])
    )
    if pairs:
        what = "destinations" if into else "sources"
        raise RingLayoutError(
            f"weight {what} of a dtype of another kind ({pairs}); the channel casts only within a kind "
            "or up to a higher one (no float into an integer tensor): convert them first"
        )


class SeqlockVersions:
    """Version bookkeeping shared by the weight readers (see Note [Weight channel seqlock]).

    A subclass sets ``_channel`` and updates ``_loaded`` when it loads a snapshot.
    """

    _channel: WeightChannel
    _loaded: int = 0

    @property
    def loaded_version(self) -> int:
        """Version last loaded into the caller's tensors (0 = nothing yet)."""
        return self._loaded

    def _overwritten(self, seq: int) -> bool:
        """Whether, since ``seq`` (even) was loaded, the writer began rewriting that version's slot."""
        return self._channel.load_seq() >= seq + 3

    def published_version(self) -> int:
        """Latest completed version (peek; loads nothing)."""
        return self._channel.load_seq() // 2

    @property
    def lag(self) -> int:
        """``published_version() - loaded_version`` (the ``async/policy_lag`` metric)."""
        return self.published_version() - self._loaded
