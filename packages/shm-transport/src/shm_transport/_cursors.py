"""``RingCursors``: a header-only segment holding a ring's two cursors (used by the CUDA-IPC ring).

The format is the host ring's header (Note [Segment header layout] in ``_segment``); the ordering
argument is Note [Ring memory ordering] in ``_host_ring``, with the CUDA-IPC additions in
Note [CUDA-IPC ring ordering] in ``_ipc_ring``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from shm_transport._platform import check_store_order_platform
from shm_transport._segment import COUNTER_A, COUNTER_B, HEADER_NBYTES, KIND_CURSORS, PRODUCER_PID, Segment
from shm_transport.exceptions import SegmentError

__all__ = ["RingCursors", "RingCursorsHandle"]

_CURSORS_FINGERPRINT = 0x43555253  # "CURS": the cursors segment has no layout


@dataclass(frozen=True)
class RingCursorsHandle:
    """Picklable handle of a ``RingCursors`` segment."""

    name: str
    """Segment name in /dev/shm."""
    capacity: int
    """Capacity of the ring these cursors belong to (checked on attach)."""


class RingCursors:
    """Two single-writer int64 cursors in host shared memory: ``write`` (producer), ``read`` (consumer)."""

    def __init__(self, segment: Segment, capacity: int) -> None:
        self._segment = segment
        self._capacity = capacity
        self._words: memoryview | None = segment.words

    @classmethod
    def create(cls, capacity: int) -> RingCursors:
        """Create the cursors in the parent (which must ``unlink`` them once the run ends)."""
        check_store_order_platform("RingCursors.create")
        if capacity < 1:
            raise SegmentError(f"RingCursors capacity={capacity} must be >= 1 (ring_capacity in the config)")
        segment = Segment.create(
            HEADER_NBYTES, kind=KIND_CURSORS, capacity=capacity, fingerprint=_CURSORS_FINGERPRINT, debug=False
        )
        return cls(segment, capacity)

    @classmethod
    def attach(cls, handle: RingCursorsHandle) -> RingCursors:
        """Attach in a worker process; ``close()`` when done."""
        check_store_order_platform("RingCursors.attach")
        segment = Segment.attach(
            handle.name, kind=KIND_CURSORS, capacity=handle.capacity, fingerprint=_CURSORS_FINGERPRINT
        )
        return cls(segment, handle.capacity)

    @property
    def handle(self) -> RingCursorsHandle:
        """Picklable handle for ``RingCursors.attach``."""
        return RingCursorsHandle(self._segment.name, self._capacity)

    @property
    def capacity(self) -> int:
        """Capacity of the ring."""
        return self._capacity

    def _cursors(self) -> memoryview:
        words = self._words
        if words is None:
            raise SegmentError(f"RingCursors {self._segment.name!r} are closed in this process; attach again")
        return words

    @property
    def write(self) -> int:
        """The published write cursor."""
        return int(self._cursors()[COUNTER_A])

    @property
    def read(self) -> int:
        """The published read cursor."""
        return int(self._cursors()[COUNTER_B])

    def publish_write(self, value: int) -> None:
        """Store the write cursor (producer only; one aligned 8-byte store)."""
        self._cursors()[COUNTER_A] = value

    def publish_read(self, value: int) -> None:
        """Store the read cursor (consumer only; one aligned 8-byte store)."""
        self._cursors()[COUNTER_B] = value

    @property
    def producer_pid(self) -> int:
        """Pid of the attached CUDA-IPC producer, 0 when none (Note [CUDA-IPC teardown order])."""
        return int(self._cursors()[PRODUCER_PID])

    def set_producer_pid(self, pid: int) -> None:
        """Record (pid) or clear (0) the attached producer (producer only)."""
        self._cursors()[PRODUCER_PID] = pid

    def close(self) -> None:
        """Drop this process's mapping (idempotent)."""
        self._words = None
        self._segment.close()

    def unlink(self) -> None:
        """Remove the name (creator only)."""
        self._segment.unlink()

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "RingCursors are not picklable: send cursors.handle and call RingCursors.attach(handle)"
        )
