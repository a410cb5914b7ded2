"""Host-memory seqlock weight writer and reader (Note [Weight channel seqlock] in ``_weight_channel``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from shm_transport._seqlock import SeqlockVersions, check_snapshot

if TYPE_CHECKING:  # a type only: _weight_channel imports this module (WeightChannelHandle.open_reader)
    from shm_transport._weight_channel import WeightChannel, WeightChannelHandle

__all__ = ["HostWeightReader", "HostWeightWriter"]

DEFAULT_MAX_RETRIES = 3
"""Torn copies a reader retries in one ``poll`` before it gives up and keeps its current weights."""


def _host_like(source: Tensor, *, pin: bool) -> Tensor:
    return torch.empty(source.shape, dtype=source.dtype, pin_memory=pin and torch.cuda.is_available())


class HostWeightWriter:
    """The learner's end of a host weight channel: ``publish`` a flat parameter vector and extras."""

    def __init__(self, channel: WeightChannel) -> None:
        self._channel = channel
        self._extras_spec = channel.extras
        # Pinned staging for CUDA sources, allocated on the first CUDA publish.
        self._staging: tuple[Tensor, dict[str, Tensor]] | None = None

    @property
    def device(self) -> torch.device:
        """``cpu``: the slots are host shared memory."""
        return torch.device("cpu")

    def reader_handle(self) -> WeightChannelHandle:
        """The handle to ship to the reader: the channel's own handle."""
        return self._channel.handle

    def publish(self, flat_params: Tensor, extras: Mapping[str, Tensor]) -> int:
        """Publish a snapshot and return its version (``seq // 2``; strictly increasing).

        A CUDA source is first copied to pinned host staging and synchronised while ``seq`` is still
        even (readers keep loading the previous version meanwhile); a host source is copied straight
        into the slot, as it already is a host copy. The caller must not modify the sources during
        the call.
        """
        channel = self._channel
        check_snapshot(channel.num_params, self._extras_spec, flat_params, extras)
        params_src, extras_src = self._host_copy(flat_params, extras)
        prev = channel.load_seq() & ~1  # even; a writer that died mid-write left it odd
        channel.store_seq(prev + 1)  # write in progress: Note [Weight channel seqlock], step 2
        params_dst, extras_dst = channel.slot((prev // 2 + 1) % 2)
        params_dst.copy_(params_src)
        for name, dst in extras_dst.items():
            dst.copy_(extras_src[name])
        channel.store_seq(prev + 2)  # after the copies returned: step 4
        return prev // 2 + 1

    def _host_copy(
        self, flat_params: Tensor, extras: Mapping[str, Tensor]
    ) -> tuple[Tensor, Mapping[str, Tensor]]:
        sources = [flat_params, *extras.values()]
        if not any(tensor.is_cuda for tensor in sources):
            return flat_params, extras
        if self._staging is None:
            params, slot_extras = self._channel.slot(0)
            self._staging = (
                _host_like(params, pin=True),
                {name: _host_like(t, pin=True) for name, t in slot_extras.items()},
            )
        params_staging, extras_staging = self._staging
        params_staging.copy_(flat_params, non_blocking=True)
        for name, tensor in extras.items():
            extras_staging[name].copy_(tensor, non_blocking=True)
        # The one GPU sync of publish: the D2H copies must land before seq goes odd.
        torch.cuda.current_stream(flat_params.device if flat_params.is_cuda else None).synchronize()
        return params_staging, extras_staging

    def close(self) -> None:
        """Release the staging buffers (the channel itself is closed by its owner)."""
        self._staging = None


class HostWeightReader(SeqlockVersions):
    """A collector's end of a host weight channel; ``poll`` never waits for the writer."""

    def __init__(
        self, channel: WeightChannel, *, max_retries: int = DEFAULT_MAX_RETRIES, close_channel: bool = False
    ) -> None:
        self._channel = channel
        self._close_channel = close_channel
        self._max_retries = max(1, max_retries)
        self._loaded = 0
        self._staging: tuple[Tensor, dict[str, Tensor]] | None = None
        self._h2d_done: torch.cuda.Event | None = None
        self._checked: tuple[int, ...] = ()  # ids of the destinations last validated
        self.torn_retries = 0
        """Copies discarded because the writer started a new write during them (a metric)."""

    def poll(self, dst_params: Tensor, dst_extras: Mapping[str, Tensor]) -> int | None:
        """Load a newer consistent snapshot into the destinations; its version, or None.

        None means "keep the current weights": nothing newer, a write in progress, or every retry
        was torn. The destinations are written only with a snapshot whose slot the writer did not
        start rewriting during the copy (Note [Weight channel seqlock]). A CUDA destination receives a
        non-blocking copy from pinned staging, ordered on the current stream.
        """
        channel = self._channel
        key = (id(dst_params), *map(id, dst_extras.values()))
        if key != self._checked or dst_params.shape != (channel.num_params,):  # full check once per set
            check_snapshot(channel.num_params, channel.extras, dst_params, dst_extras, into=True)
            self._checked = key
        params_staging, extras_staging = self._staging_for(dst_params)
        for _ in range(self._max_retries):
            seq = channel.load_seq()
            version = seq // 2
            if seq & 1 or version <= self._loaded:
                return None
            if self._h2d_done is not None:
                self._h2d_done.synchronize()  # our previous H2D out of staging, not the writer
            params_src, extras_src = channel.slot(version % 2)
            params_staging.copy_(params_src)
            for name, staging in extras_staging.items():
                staging.copy_(extras_src[name])
            if self._overwritten(seq):  # re-check after the copy: step 3 of the note
                self.torn_retries += 1
                continue
            self._deliver(dst_params, dst_extras)
            self._loaded = version
            return version
        return None

    def _staging_for(self, dst_params: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        if self._staging is None:
            params, extras = self._channel.slot(0)
            pin = dst_params.is_cuda
            self._staging = (
                _host_like(params, pin=pin),
                {name: _host_like(t, pin=pin) for name, t in extras.items()},
            )
        return self._staging

    def _deliver(self, dst_params: Tensor, dst_extras: Mapping[str, Tensor]) -> None:
        assert self._staging is not None
        params_staging, extras_staging = self._staging
        dst_params.copy_(params_staging, non_blocking=dst_params.is_cuda)
        for name, dst in dst_extras.items():
            dst.copy_(extras_staging[name], non_blocking=dst.is_cuda)
        cuda_dsts = [dst for dst in (dst_params, *dst_extras.values()) if dst.is_cuda]
        if cuda_dsts:
            if self._h2d_done is None:
                self._h2d_done = torch.cuda.Event()  # type: ignore[no-untyped-call]
            # Assumes one destination device (the collector's); the event guards reuse of staging.
            self._h2d_done.record(torch.cuda.current_stream(cuda_dsts[0].device))

    def close(self) -> None:
        """Release the staging buffers, and the channel if opened with ``close_channel``."""
        if self._h2d_done is not None:
            self._h2d_done.synchronize()
        self._staging = None
        if self._close_channel:
            self._channel.close()
