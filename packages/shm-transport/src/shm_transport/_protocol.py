"""The interfaces every transport implements: rings and weight writers/readers, and the handles between them.

# Note [Handles open their own end]
A handle says how to open the end it is sent to, so a caller never dispatches on its type: the
consumer of a ring ships ``ring.producer_handle()`` and the producer calls ``open_producer()`` on it;
a weight writer ships ``writer.reader_handle()`` and the reader calls ``open_reader()`` on it. The
same code then serves host memory and CUDA IPC; ``device`` says where an end's slots live, for a
caller whose copies depend on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from shm_transport._layout import RingLayout

__all__ = ["RingProducerHandle", "TransitionRing", "WeightReader", "WeightReaderHandle", "WeightWriter"]


@runtime_checkable
class TransitionRing(Protocol):
    """A single-producer single-consumer ring of transition slots.

    The producer calls ``push``; the consumer calls ``read_span`` then, once it has copied the data
    out, ``commit_reads``. ``0 <= write_count - read_count <= capacity`` always holds.
    """

    @property
    def capacity(self) -> int:
        """Number of slots."""
        ...

    @property
    def layout(self) -> RingLayout:
        """Fields of one slot."""
        ...

    @property
    def device(self) -> torch.device:
        """Where the slots live (``read_span``'s views are there): ``cpu`` for host shared memory."""
        ...

    @property
    def write_count(self) -> int:
        """Slots published by the producer since creation (the shared write cursor)."""
        ...

    @property
    def read_count(self) -> int:
        """Slots committed by the consumer since creation (the shared read cursor)."""
        ...

    def push(self, fields: Mapping[str, Tensor]) -> bool:
        """Write one slot; False (and nothing written) when the ring is full."""
        ...

    def is_full(self) -> bool:
        """Whether a push would return False now."""
        ...

    def flush(self) -> None:
        """Producer: wait until every pushed slot is visible to the consumer (its cursor published).

        A host ring publishes each push at once; a device ring publishes a push once its copy has
        landed, so a producer that announces "all pushed" elsewhere flushes first.
        """
        ...

    def size(self) -> int:
        """Slots written and not yet committed as read."""
        ...

    def read_span(self, max_slots: int) -> tuple[int, dict[str, Tensor]]:
        """Zero-copy ``(k, num_envs, *shape)`` views of the longest contiguous unread run (k=0: empty)."""
        ...

    def commit_reads(self, n: int) -> None:
        """Release the ``n`` oldest unread slots to the producer (after their data was copied out)."""
        ...

    def push_blocking(
        self, fields: Mapping[str, Tensor], timeout_s: float, should_stop: Callable[[], bool] | None = None
    ) -> bool:
        """Push, waiting up to ``timeout_s`` for room; False on timeout or stop."""
        ...

    def read_span_blocking(
        self, max_slots: int, timeout_s: float, should_stop: Callable[[], bool] | None = None
    ) -> tuple[int, dict[str, Tensor]]:
        """``read_span``, waiting up to ``timeout_s`` for data; k=0 on timeout or stop."""
        ...

    def producer_handle(self) -> RingProducerHandle:
        """Consumer end: the picklable handle to ship to the producer (Note [Handles open their own end])."""
        ...

    def close(self, *, timeout_s: float = 10.0) -> None:
        """Release this process's resources of the ring (idempotent).

        A consumer whose slots the producer still maps waits up to ``timeout_s`` for it to detach
        (Note [CUDA-IPC teardown order]); a host ring end never waits.
        """
        ...


@runtime_checkable
class RingProducerHandle(Protocol):
    """A picklable handle from a ring's consumer that opens the producer end where it is received."""

    def open_producer(self) -> TransitionRing:
        """Attach the producer end in this process; ``close()`` it when done."""
        ...


@runtime_checkable
class WeightWriter(Protocol):
    """The learner's end of a weight channel."""

    def publish(self, flat_params: Tensor, extras: Mapping[str, Tensor]) -> int:
        """Publish a snapshot; returns its version (strictly increasing)."""
        ...

    @property
    def device(self) -> torch.device:
        """Where the writer's slots live: ``cpu`` (host memory: a CUDA source is copied to host first)."""
        ...

    def reader_handle(self) -> WeightReaderHandle:
        """The picklable handle to ship to the reader (Note [Handles open their own end])."""
        ...

    def close(self) -> None:
        """Release this process's resources (idempotent)."""
        ...


@runtime_checkable
class WeightReader(Protocol):
    """A collector's end of a weight channel; it never waits for the writer."""

    @property
    def loaded_version(self) -> int:
        """Version last loaded into the caller's tensors (0 = nothing loaded yet)."""
        ...

    @property
    def lag(self) -> int:
        """Published version minus loaded version (the policy lag)."""
        ...

    def published_version(self) -> int:
        """Latest completed version, without loading anything."""
        ...

    def poll(self, dst_params: Tensor, dst_extras: Mapping[str, Tensor]) -> int | None:
        """Load a newer consistent snapshot into the destinations and return its version, else None."""
        ...

    def close(self) -> None:
        """Release this process's resources (idempotent)."""
        ...


@runtime_checkable
class WeightReaderHandle(Protocol):
    """A picklable handle from a weight writer that opens the reader end where it is received."""

    def open_reader(self) -> WeightReader:
        """Attach the reader end in this process; its ``close()`` releases everything it attached."""
        ...
