"""CUDA-IPC seqlock weight writer and reader: device slots owned by the learner, ``seq`` in host shm.

Same protocol as Note [Weight channel seqlock] (``_weight_channel``) with device slots: the writer's
copy into a slot is a D2D copy on a side stream whose event is *synchronised* before ``seq`` goes
even; the reader copies the slot into private device staging, synchronises its own copy, re-checks
``seq``, and only then copies staging into the caller's tensors (on the current stream). Same GPU
only. The learner allocates the slots, so every reader closes before the writer's process exits
(Note [CUDA-IPC teardown order] in ``_ipc_ring``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from shm_transport._ipc_probe import require_cuda_ipc
from shm_transport._seqlock import PARAMS_DTYPE, SeqlockVersions, check_snapshot
from shm_transport._weight_channel import WeightChannel, WeightChannelHandle
from shm_transport.exceptions import CudaIpcUnavailable, SegmentError

__all__ = ["CudaIpcWeightHandle", "CudaIpcWeightReader", "CudaIpcWeightWriter"]


@dataclass(frozen=True)
class CudaIpcWeightHandle:
    """Ship to the collector through a torch multiprocessing queue (e.g. ``StartupHandshake.ship``)."""

    channel: WeightChannelHandle
    """The host segment holding ``seq``."""
    params: Tensor
    """Device slots of the flat parameters, ``(2, num_params)`` float32."""
    extras: dict[str, Tensor]
    """Device slots of each extra, ``(2, *shape)``."""

    def open_reader(self) -> CudaIpcWeightReader:
        """``CudaIpcWeightReader(self)`` (Note [Handles open their own end] in ``_protocol``)."""
        return CudaIpcWeightReader(self)


class CudaIpcWeightWriter:
    """The learner's end: two device slots on ``device``; ``publish`` is a D2D copy plus an event sync."""

    def __init__(self, channel: WeightChannel, device: torch.device | str | int) -> None:
        require_cuda_ipc(device, "CudaIpcWeightWriter")
        dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        self._channel = channel
        self._device = dev
        self._params: Tensor | None = torch.zeros((2, channel.num_params), dtype=PARAMS_DTYPE, device=dev)
        self._extras = {
            name: torch.zeros((2, *spec.shape), dtype=spec.dtype, device=dev)
            for name, spec in channel.extras.items()
        }
        self._stream = torch.cuda.Stream(device=dev)  # type: ignore[no-untyped-call]
        self._done = torch.cuda.Event()  # type: ignore[no-untyped-call]

    @property
    def device(self) -> torch.device:
        """The GPU holding the slots."""
        return self._device

    def reader_handle(self) -> CudaIpcWeightHandle:
        """The handle a collector passes to ``CudaIpcWeightReader``."""
        if self._params is None:
            raise SegmentError("CudaIpcWeightWriter is closed")
        return CudaIpcWeightHandle(self._channel.handle, self._params, dict(self._extras))

    def publish(self, flat_params: Tensor, extras: Mapping[str, Tensor]) -> int:
        """Publish a snapshot (sources on the writer's device or host); returns the new version."""
        if self._params is None:
            raise SegmentError("CudaIpcWeightWriter is closed")
        channel = self._channel
        check_snapshot(channel.num_params, channel.extras, flat_params, extras)
        prev = channel.load_seq() & ~1
        target = (prev // 2 + 1) % 2
        channel.store_seq(prev + 1)  # Note [Weight channel seqlock], step 2
        self._stream.wait_stream(torch.cuda.current_stream(self._params.device))  # sources are ready
        with torch.cuda.stream(self._stream):
            self._params[target].copy_(flat_params, non_blocking=True)
            for name, slots in self._extras.items():
                slots[target].copy_(extras[name], non_blocking=True)
            self._done.record(self._stream)
        self._done.synchronize()  # the slot must hold the snapshot before seq goes even
        channel.store_seq(prev + 2)
        return prev // 2 + 1

    def close(self) -> None:
        """Free the device slots; call it after every reader closed (Note [CUDA-IPC teardown order])."""
        self._params = None
        self._extras = {}


class CudaIpcWeightReader(SeqlockVersions):
    """The collector's end (same GPU as the writer); ``poll`` never waits for the writer."""

    def __init__(self, handle: CudaIpcWeightHandle, *, max_retries: int = 3) -> None:
        if not handle.params.is_cuda:
            raise CudaIpcUnavailable(
                f"CudaIpcWeightHandle.params is on {handle.params.device}, not a CUDA device"
            )
        self._channel = WeightChannel.attach(handle.channel)
        self._params: Tensor | None = handle.params
        self._extras = dict(handle.extras)
        self._device = handle.params.device
        self._staging = torch.empty_like(handle.params[0])
        self._extras_staging = {name: torch.empty_like(slots[0]) for name, slots in handle.extras.items()}
        self._stream = torch.cuda.Stream(device=self._device)  # type: ignore[no-untyped-call]
        self._copied = torch.cuda.Event()  # type: ignore[no-untyped-call]
        self._max_retries = max(1, max_retries)
        self._loaded = 0
        self.torn_retries = 0
        """Copies discarded because the writer started a new write during them."""

    def poll(self, dst_params: Tensor, dst_extras: Mapping[str, Tensor]) -> int | None:
        """Load a newer consistent snapshot into the destinations; its version, or None (keep current)."""
        if self._params is None:
            raise SegmentError("CudaIpcWeightReader is closed")
        channel = self._channel
        check_snapshot(channel.num_params, channel.extras, dst_params, dst_extras, into=True)
        current = torch.cuda.current_stream(self._device)
        for _ in range(self._max_retries):
            seq = channel.load_seq()
            version = seq // 2
            if seq & 1 or version <= self._loaded:
                return None
            slot = version % 2
            self._stream.wait_stream(current)  # the previous delivery out of staging is done
            with torch.cuda.stream(self._stream):
                self._staging.copy_(self._params[slot], non_blocking=True)
                for name, staging in self._extras_staging.items():
                    staging.copy_(self._extras[name][slot], non_blocking=True)
                self._copied.record(self._stream)
            self._copied.synchronize()  # our own copy, not the writer: the re-check needs it finished
            if self._overwritten(seq):  # step 3 of Note [Weight channel seqlock]
                self.torn_retries += 1
                continue
            dst_params.copy_(self._staging, non_blocking=True)
            for name, dst in dst_extras.items():
                dst.copy_(self._extras_staging[name], non_blocking=True)
            self._loaded = version
            return version
        return None

    def close(self) -> None:
        """Drop the IPC mapping and the channel (before the writer's process exits)."""
        if self._params is None:
            return
        torch.cuda.current_stream(self._device).synchronize()
        self._params = None
        self._extras = {}
        self._channel.close()
