"""Each collector's transition ring and weight channel: what they carry, and which transport opens them.

A ring's slot is :func:`ring_layout` (fastsac-core's transition fields); a weight snapshot carries
the actor and :func:`weight_extras`, the policy extras and the publish stamp (:data:`PUBLISHED_GSTEP`).

# Note [transport by name]
The plan (``topology``) names two transports per collector, ``transition_transport`` and
``weight_transport``, each ``"host"`` or ``"cuda_ipc"``. This module is the only one of fastsac-async
that reads those names; everyone else asks it, and gets an object that opens itself:

1. The parent calls :func:`offer_transports`: per collector it creates the segments the named
   transports need (kept in :class:`Segments`, which unlinks and closes them) and returns one
   picklable offer for the ring and one for the weights, which it hands to the collector's learner.
2. The learner opens its ends through :class:`LearnerEnds`: ``offer.open_consumer(device)`` and
   ``offer.open_writer(channel, device)``; each end says what to ship to the collector
   (``ring.producer_handle()``, ``writer.reader_handle()``), carried in a :class:`CollectorPayload`.
3. The collector calls ``open_producer()`` and ``open_reader()`` on that payload's handles (Note
   [Handles open their own end] in ``shm_transport._protocol``).

The fallback is decided here too. CUDA IPC can fail on the learner's device (a virtualised GPU,
expandable segments) in a way only the learner sees, so the parent always creates a host ring and
host weight slots, and a CUDA-IPC offer that raises ``CudaIpcUnavailable`` opens those instead and
logs why. An unused host ring or weight slot costs shared memory until the names are unlinked after
boot (Note [engine lifecycle]).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field

import torch
from torch import Tensor

from fastsac_async.spec import EngineSpec
from fastsac_core import EnvDims, build_actor, policy_extra_fields, transition_fields
from shm_transport import (
    CudaIpcRing,
    CudaIpcUnavailable,
    CudaIpcWeightWriter,
    FieldSpec,
    HostRing,
    HostRingHandle,
    HostWeightWriter,
    RingCursors,
    RingCursorsHandle,
    RingLayout,
    RingProducerHandle,
    TransitionRing,
    WeightChannel,
    WeightChannelHandle,
    WeightReaderHandle,
    WeightWriter,
)

__all__ = [
    "PUBLISHED_GSTEP",
    "CollectorPayload",
    "CudaIpcRingOffer",
    "CudaIpcWeightOffer",
    "LearnerEnds",
    "RingOffer",
    "Segments",
    "WeightOffer",
    "offer_transports",
    "published_stamp",
    "ring_layout",
    "transition_ring_bytes",
    "weight_extras",
]

_log = logging.getLogger(__name__)

PUBLISHED_GSTEP = "published_gstep"
"""The weight extra that stamps a snapshot with the global step it was published at (int64, ``(1,)``):
an evaluation is logged at the env steps of the weights it ran (Note [evaluation during training])."""


def ring_layout(dims: EnvDims, num_envs: int) -> RingLayout:
    """The transition slot of a collector stepping ``num_envs`` envs (fastsac_core's transition fields)."""
    return RingLayout.of(num_envs, transition_fields(dims.obs_dim, dims.stored_critic_obs_dim, dims.act_dim))


def transition_ring_bytes(dims: EnvDims, num_envs: int, capacity: int) -> int:
    """Shared-memory bytes of one collector's transition ring (``num_envs`` envs, ``capacity`` slots)."""
    return HostRing.nbytes(ring_layout(dims, num_envs), capacity)


def weight_extras(dims: EnvDims) -> dict[str, FieldSpec]:
    """Extras published with the actor weights: ``FastSACAgent.policy_extras`` and ``PUBLISHED_GSTEP``."""
    extras = {
        name: FieldSpec(shape, dtype) for name, (shape, dtype) in policy_extra_fields(dims.obs_dim).items()
    }
    extras[PUBLISHED_GSTEP] = FieldSpec((1,), torch.int64)
    return extras


def published_stamp(gstep: int) -> Tensor:
    """The ``PUBLISHED_GSTEP`` extra of a snapshot published at ``gstep`` (a fresh host tensor)."""
    return torch.tensor([gstep], dtype=torch.int64)


@dataclass(frozen=True, kw_only=True)
class RingOffer:
    """A collector's host transition ring, as its learner receives it from the parent."""

    collector: int
    """Index of the collector that produces into the ring."""
    ring: HostRingHandle
    """The host ring (the transport, or the fallback of a CUDA-IPC offer)."""

    def open_consumer(self, device: torch.device) -> TransitionRing:
        """The learner's (consumer) end of the ring; ``device`` is the learner's."""
        return HostRing.attach(self.ring)


@dataclass(frozen=True, kw_only=True)
class CudaIpcRingOffer(RingOffer):
    """A ring planned on CUDA IPC: the learner allocates its slots, or falls back to ``ring``."""

    cursors: RingCursorsHandle
    """Shared cursors of the CUDA-IPC ring."""

    def open_consumer(self, device: torch.device) -> TransitionRing:
        """A CUDA-IPC ring with slots on ``device``, else (logged) the host ring."""
        try:
            return CudaIpcRing.create_consumer(self.ring.layout, self.ring.capacity, device, self.cursors)
        except CudaIpcUnavailable as error:
            _log.warning("collector%d: host transition ring instead of CUDA IPC: %s", self.collector, error)
            return super().open_consumer(device)


@dataclass(frozen=True, kw_only=True)
class WeightOffer:
    """A collector's weight channel (with host slots), as its learner receives it from the parent."""

    collector: int
    """Index of the collector that reads the weights."""
    channel: WeightChannelHandle
    """The channel: its sequence number, and the host slots (the transport, or the fallback)."""

    def open_writer(self, channel: WeightChannel, device: torch.device) -> WeightWriter:
        """The learner's writer over ``channel`` (attached from :attr:`channel`)."""
        return HostWeightWriter(channel)


@dataclass(frozen=True, kw_only=True)
class CudaIpcWeightOffer(WeightOffer):
    """Weights planned on CUDA IPC: the learner allocates device slots, or falls back to the host ones."""

    def open_writer(self, channel: WeightChannel, device: torch.device) -> WeightWriter:
        """A CUDA-IPC writer with slots on ``device``, else (logged) the host writer."""
        try:
            return CudaIpcWeightWriter(channel, device)
        except CudaIpcUnavailable as error:
            _log.warning("collector%d: host weight channel instead of CUDA IPC: %s", self.collector, error)
            return super().open_writer(channel, device)


@dataclass(frozen=True)
class CollectorPayload:
    """What a learner ships to one of its collectors through the startup handshake."""

    ring: RingProducerHandle
    """Opens the collector's (producer) end of its ring."""
    weights: WeightReaderHandle
    """Opens the collector's reader of its weight channel."""


@dataclass
class Segments:
    """The shared-memory segments the parent created for a run (the only creator, so the one to unlink)."""

    created: list[HostRing | RingCursors | WeightChannel] = field(default_factory=list)
    """Every segment, in creation order."""

    def unlink(self) -> None:
        """Remove every name (idempotent); mappings stay valid in every process that attached."""
        for seg in self.created:
            try:
                seg.unlink()
            except Exception:
                _log.exception("could not unlink a segment")

    def release(self) -> None:
        """Unlink every name, then close the parent's mappings."""
        self.unlink()
        for seg in self.created:
            with contextlib.suppress(Exception):
                seg.close()
        self.created.clear()


def offer_transports(
    spec: EngineSpec, segments: Segments
) -> tuple[dict[int, RingOffer], dict[int, WeightOffer]]:
    """Create every collector's ring and weight channel as the plan names them; the learners' offers.

    A host ring and host weight slots always exist (the fallback of CUDA IPC: Note [transport by name]).
    """
    dims = spec.run.dims
    numel = sum(p.numel() for p in build_actor(dims, spec.agent).parameters())
    rings: dict[int, RingOffer] = {}
    weights: dict[int, WeightOffer] = {}
    for c in spec.topology.collectors:
        cap = spec.options.ring_capacity
        host = HostRing.create(ring_layout(dims, c.env_stop - c.env_start), cap)
        segments.created.append(host)
        if c.transition_transport == "cuda_ipc":
            cursors = RingCursors.create(cap)
            segments.created.append(cursors)
            rings[c.index] = CudaIpcRingOffer(collector=c.index, ring=host.handle, cursors=cursors.handle)
        else:
            rings[c.index] = RingOffer(collector=c.index, ring=host.handle)
        channel = WeightChannel.create(numel, weight_extras(dims), host_slots=True)
        segments.created.append(channel)
        kind = CudaIpcWeightOffer if c.weight_transport == "cuda_ipc" else WeightOffer
        weights[c.index] = kind(collector=c.index, channel=channel.handle)
    return rings, weights


class LearnerEnds:
    """A learner's ends of its collectors' rings and weight channels, closed in teardown order.

    Args:
        device: The learner's device (where CUDA-IPC slots are allocated).
        timeout_s: One deadline for closing every ring (Note [CUDA-IPC teardown order]).
    """

    def __init__(self, device: torch.device, timeout_s: float) -> None:
        self._device = device
        self._timeout_s = timeout_s
        self.rings: list[TransitionRing] = []
        """Consumer ends, in the order opened (collector order)."""
        self.writers: list[WeightWriter] = []
        """Weight writers, in the same order."""
        self._channels: list[WeightChannel] = []

    def open(self, ring: RingOffer, weights: WeightOffer) -> CollectorPayload:
        """Open one collector's ring and weight writer; what to ship to that collector."""
        consumer = ring.open_consumer(self._device)
        self.rings.append(consumer)
        channel = WeightChannel.attach(weights.channel)
        self._channels.append(channel)
        writer = weights.open_writer(channel, self._device)
        self.writers.append(writer)
        return CollectorPayload(ring=consumer.producer_handle(), weights=writer.reader_handle())

    def close(self) -> None:
        """Close the writers, then the rings within one shared deadline, then the channels.

        A CUDA-IPC consumer waits for its producer (collector) to detach before it frees the slots
        (Note [CUDA-IPC teardown order]); each ring gets what is left of one deadline, so a learner's
        teardown is bounded by ``timeout_s`` whatever its ring count.
        """
        for writer in self.writers:
            writer.close()
        deadline = time.monotonic() + self._timeout_s
        for ring in self.rings:
            ring.close(timeout_s=max(0.0, deadline - time.monotonic()))
        for channel in self._channels:
            channel.close()
