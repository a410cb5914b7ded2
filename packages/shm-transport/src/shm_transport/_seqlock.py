"""What both weight readers share of the seqlock (Note [Weight channel seqlock] in ``_weight_channel``).

A reader's version bookkeeping and overwrite check, and the size check of a snapshot. It needs the channel
only as a type, so the modules above it import without a circle: ``_weight_channel`` imports
``_host_weights`` (``WeightChannelHandle.open_reader`` builds a ``HostWeightReader``), and
``_host_weights`` and ``_ipc_weights`` import this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from torch import Tensor

from shm_transport._layout import FieldSpec
from shm_transport.exceptions import RingLayoutError

if TYPE_CHECKING:
    from shm_transport._weight_channel import WeightChannel

__all__ = ["SeqlockVersions", "check_snapshot"]


def check_snapshot(
    num_params: int, extras: Mapping[str, FieldSpec], flat_params: Tensor, given: Mapping[str, Tensor]
) -> None:
    """Raise ``RingLayoutError`` unless ``flat_params``/``given`` match the channel's sizes."""
    if flat_params.dim() != 1 or flat_params.numel() != num_params:
        raise RingLayoutError(
            f"flat params have shape {tuple(flat_params.shape)}, the weight channel needs ({num_params},); "
            "flatten the actor (e.g. torch.nn.utils.parameters_to_vector)"
        )
    shapes = {name: tuple(tensor.shape) for name, tensor in given.items()}
    wanted = {name: spec.shape for name, spec in extras.items()}
    if shapes != wanted:
        raise RingLayoutError(f"weight extras have shapes {shapes}, the channel was created with {wanted}")


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
