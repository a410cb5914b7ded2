"""``CudaIpcRing``: the SPSC transition ring with slots in one device tensor shared over CUDA IPC.

# Note [CUDA-IPC ring ordering]

The consumer (learner) allocates ``slots``, float32 ``(capacity, num_envs, total_features)`` with the
fields packed side by side (ints and bools ride as floats: exact for 0/1 and integers below 2**24),
and ships it to the producer (collector) inside ``producer_handle()``. The cursors live in host shared
memory (``RingCursors``) and obey Note [Ring memory ordering]; each side additionally keeps an
*issued* counter that runs ahead of its published cursor while copies are in flight:

* producer ``push``: pack the fields into pinned staging (after the previous H2D from it has
  finished), issue one non-blocking H2D into ``slots[issued_writes % C]`` on a side stream, record an
  event, ``issued_writes += 1``. The shared write cursor moves to ``k`` only once the event of push
  ``k`` has completed (``_flush_writes``, run lazily by ``push``, ``is_full``, ``size`` and ``flush``),
  so the consumer never sees a cursor ahead of its data (never rely on implicit ordering:
  pytorch#156618). ``is_full`` counts *issued* writes, so a burst cannot exceed the capacity.
* consumer ``read_span``: start at its own ``issued_reads`` (never at the published read cursor, which
  lags) and return strided device views. ``commit_reads(n)`` records an event on the current stream,
  after the caller's D2D copies were enqueued, and ``issued_reads += n``; the shared read cursor moves
  only once that event completed, so the producer never overwrites a slot still being copied out.

# Note [CUDA-IPC teardown order]

The allocating process must outlive every process that maps its memory (torch warns "Producer process
has been terminated before all shared CUDA tensors released" otherwise, and the mapping dies with it).
Here the consumer (learner) allocates, so: the producer (collector) calls ``close()`` first, which
finishes its in-flight copies, publishes the write cursor, drops its IPC mapping and clears the
producer pid in the cursors header; then the consumer calls ``close()``, which waits (bounded) until
that pid is cleared or its process is dead before it frees the slots. The parent therefore stops and
joins collectors before it lets learners exit.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn

import torch
from torch import Tensor

from shm_transport._cleanup import pid_alive
from shm_transport._cursors import RingCursors, RingCursorsHandle
from shm_transport._ipc_probe import require_cuda_ipc
from shm_transport._layout import FieldSpec, RingLayout
from shm_transport._waiting import BlockingRingOps
from shm_transport.exceptions import CudaIpcUnavailable, RingLayoutError, SegmentError, UnwrittenSlotError

__all__ = ["CudaIpcProducerHandle", "CudaIpcRing"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CudaIpcProducerHandle:
    """What the producer needs: the device slots (pickled through torch's CUDA-IPC reducer) and cursors.

    Send it only through a ``torch.multiprocessing`` (or any multiprocessing, once
    ``torch.multiprocessing`` is imported) queue, e.g. ``StartupHandshake.ship``.
    """

    slots: Tensor
    """The fused float32 ``(capacity, num_envs, total_features)`` device tensor."""
    layout: RingLayout
    """Fields of one slot."""
    capacity: int
    """Number of slots."""
    cursors: RingCursorsHandle
    """Host cursors shared by both ends."""
    debug: bool
    """Whether the consumer checks for unwritten (sentinel) rows."""

    def open_producer(self) -> CudaIpcRing:
        """``CudaIpcRing.attach_producer(self)`` (Note [Handles open their own end] in ``_protocol``)."""
        return CudaIpcRing.attach_producer(self)


def _columns(layout: RingLayout) -> list[tuple[str, FieldSpec, int, int]]:
    columns, start = [], 0
    for name, spec in layout.fields:
        columns.append((name, spec, start, spec.numel))
        start += spec.numel
    return columns


class CudaIpcRing(BlockingRingOps):
    """Transition ring in device memory; same interface as ``HostRing`` (Note [CUDA-IPC ring ordering])."""

    def __init__(
        self,
        slots: Tensor,
        layout: RingLayout,
        capacity: int,
        cursors: RingCursors,
        *,
        producer: bool,
        debug: bool,
    ) -> None:
        self._slots: Tensor | None = slots
        self._layout = layout
        self._capacity = capacity
        self._cursors = cursors
        self._producer = producer
        self._debug = debug
        self._device = slots.device
        self._columns = _columns(layout)
        self._issued = 0  # issued writes (producer) or issued reads (consumer)
        self._pending: deque[tuple[int, torch.cuda.Event]] = deque()
        self._events = [torch.cuda.Event() for _ in range(capacity + 1)]  # type: ignore[no-untyped-call]
        self._next_event = 0
        self._stream: torch.cuda.Stream | None = None
        self._staging: Tensor | None = None
        self._staging_free: torch.cuda.Event | None = None

    # ----------------------------------------------------------------------------------- lifecycle
    @classmethod
    def create_consumer(
        cls,
        layout: RingLayout,
        capacity: int,
        device: torch.device | str | int,
        cursors_handle: RingCursorsHandle,
        *,
        debug: bool = False,
    ) -> CudaIpcRing:
        """Allocate the slots on ``device`` in the consumer (learner) process.

        Raises:
            CudaIpcUnavailable: no CUDA, expandable segments, or IPC export fails (use ``HostRing``).
        """
        require_cuda_ipc(device, "CudaIpcRing.create_consumer")
        if capacity < 1 or cursors_handle.capacity != capacity:
            raise RingLayoutError(
                f"CudaIpcRing capacity={capacity} must be >= 1 and equal the cursors' capacity "
                f"({cursors_handle.capacity}); create RingCursors with the same ring_capacity"
            )
        dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        slots = torch.empty(
            (capacity, layout.num_envs, layout.total_features), dtype=torch.float32, device=dev
        )
        if debug:
            for _, spec, start, width in _columns(layout):
                slots[..., start : start + width].fill_(float(spec.sentinel()))
        else:
            slots.zero_()
        # Once, at start-up: the producer's side-stream copies must not race this initialisation.
        torch.cuda.synchronize(dev)
        cursors = RingCursors.attach(cursors_handle)
        ring = cls(slots, layout, capacity, cursors, producer=False, debug=debug)
        ring._issued = cursors.read
        return ring

    def producer_handle(self) -> CudaIpcProducerHandle:
        """The handle to ship to the producer (consumer side only)."""
        if self._producer:
            raise SegmentError("producer_handle() is called on the consumer (the allocating learner)")
        return CudaIpcProducerHandle(
            self._live_slots(), self._layout, self._capacity, self._cursors.handle, self._debug
        )

    @classmethod
    def attach_producer(cls, handle: CudaIpcProducerHandle) -> CudaIpcRing:
        """Attach the producer (collector) end; raises ``CudaIpcUnavailable`` if the slots are unusable."""
        slots = handle.slots
        if not slots.is_cuda:
            raise CudaIpcUnavailable(f"CudaIpcProducerHandle.slots is on {slots.device}, not a CUDA device")
        try:
            slots[0, 0, :1].sum().item()  # touch the imported mapping once, at start-up
        except RuntimeError as error:
            raise CudaIpcUnavailable(
                f"the shared ring slots on {slots.device} cannot be read here: {error}"
            ) from error
        cursors = RingCursors.attach(handle.cursors)
        ring = cls(slots, handle.layout, handle.capacity, cursors, producer=True, debug=handle.debug)
        ring._issued = cursors.write
        ring._stream = torch.cuda.Stream(device=slots.device)  # type: ignore[no-untyped-call]
        ring._staging = torch.empty(
            (handle.layout.num_envs, handle.layout.total_features), dtype=torch.float32, pin_memory=True
        )
        cursors.set_producer_pid(os.getpid())
        return ring

    def close(self, *, timeout_s: float = 10.0) -> None:
        """Release this end (idempotent). Producer first, then consumer: Note [CUDA-IPC teardown order].

        The producer finishes and publishes its in-flight pushes. The consumer waits up to
        ``timeout_s`` for the producer to detach (or die) and logs a warning if it does not.
        """
        if self._slots is None:
            return
        if self._producer:
            self.flush()
            self._cursors.set_producer_pid(0)
        else:
            self._wait_producer_detached(timeout_s)
        self._slots = None
        self._staging = None
        self._pending.clear()
        self._cursors.close()

    def _wait_producer_detached(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while (pid := self._cursors.producer_pid) and pid_alive(pid):
            if time.monotonic() > deadline:
                _log.warning(
                    "CudaIpcRing consumer closing while producer pid %d is still attached; close the "
                    "producer (collector) first (Note [CUDA-IPC teardown order])",
                    pid,
                )
                return
            time.sleep(0.01)

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "a CudaIpcRing is not picklable: ship ring.producer_handle() and call attach_producer"
        )

    def _live_slots(self) -> Tensor:
        if self._slots is None:
            raise SegmentError("this CudaIpcRing end is closed")
        return self._slots

    # ------------------------------------------------------------------------------------ counters
    @property
    def capacity(self) -> int:
        """Number of slots."""
        return self._capacity

    @property
    def layout(self) -> RingLayout:
        """Fields of one slot."""
        return self._layout

    @property
    def device(self) -> torch.device:
        """The GPU holding the slots."""
        return self._device

    @property
    def write_count(self) -> int:
        """Published write cursor (the producer's issued count may be ahead)."""
        if self._producer:
            self._flush()
        return self._cursors.write

    @property
    def read_count(self) -> int:
        """Published read cursor (the consumer's issued count may be ahead)."""
        if not self._producer:
            self._flush()
        return self._cursors.read

    @property
    def issued_count(self) -> int:
        """This end's issued writes (producer) or issued reads (consumer)."""
        return self._issued

    def size(self) -> int:
        """Producer: issued writes not yet committed. Consumer: published writes not yet issued as read."""
        self._flush()
        if self._producer:
            return self._issued - self._cursors.read
        return self._cursors.write - self._issued

    def is_full(self) -> bool:
        """Whether a push would return False now (counts issued writes)."""
        self._flush()
        if self._producer:
            return self._issued - self._cursors.read >= self._capacity
        return self._cursors.write - self._cursors.read >= self._capacity

    @property
    def fill(self) -> float:
        """Occupancy ``(write - read) / capacity`` from the published cursors."""
        self._flush()
        return (self._cursors.write - self._cursors.read) / self._capacity

    def _flush(self) -> None:
        """Publish the cursor of every completed copy, oldest first (Note [CUDA-IPC ring ordering])."""
        published = None
        while self._pending and self._pending[0][1].query():  # type: ignore[no-untyped-call]
            published = self._pending.popleft()[0]
        if published is not None:
            if self._producer:
                self._cursors.publish_write(published)
            else:
                self._cursors.publish_read(published)

    def flush(self) -> None:
        """Wait for every in-flight copy of this end and publish its cursor."""
        if self._pending:
            self._pending[-1][1].synchronize()
        self._flush()

    def _take_event(self) -> torch.cuda.Event:
        # capacity + 1 events, used round-robin: at most capacity are pending, so this one is free.
        event = self._events[self._next_event]
        self._next_event = (self._next_event + 1) % len(self._events)
        return event

    # ---------------------------------------------------------------------------------- producer
    def push(self, fields: Mapping[str, Tensor]) -> bool:
        """Pack, issue the H2D copy of one slot; False (nothing written) when issued writes fill the ring."""
        if not self._producer:
            raise SegmentError(
                "push() is called on the consumer end of a CudaIpcRing; push from the producer"
            )
        slots = self._live_slots()
        self._flush()
        if self._issued - self._cursors.read >= self._capacity:
            return False
        self._layout.check_push(fields)
        assert self._staging is not None and self._stream is not None
        if self._staging_free is not None:
            self._staging_free.synchronize()  # the previous H2D still reads the staging buffer
        num_envs = self._layout.num_envs
        for name, _, start, width in self._columns:
            self._staging[:, start : start + width].copy_(fields[name].reshape(num_envs, width))
        event = self._take_event()
        with torch.cuda.stream(self._stream):
            slots[self._issued % self._capacity].copy_(self._staging, non_blocking=True)
            event.record(self._stream)
        self._staging_free = event
        self._issued += 1
        self._pending.append((self._issued, event))
        return True

    # ---------------------------------------------------------------------------------- consumer
    def read_span(self, max_slots: int) -> tuple[int, dict[str, Tensor]]:
        """Strided float32 device views ``(k, num_envs, *shape)`` of the next run, from the issued reads."""
        if self._producer:
            raise SegmentError("read_span() is called on the producer end of a CudaIpcRing")
        slots = self._live_slots()
        self._flush()
        available = self._cursors.write - self._issued
        if available <= 0 or max_slots <= 0:
            return 0, {}
        slot = self._issued % self._capacity
        count = min(available, self._capacity - slot, max_slots)
        block = slots[slot : slot + count]
        views: dict[str, Tensor] = {}
        for name, spec, start, width in self._columns:
            if spec.shape == ():
                views[name] = block[..., start]
            else:
                views[name] = block[..., start : start + width].view(*block.shape[:-1], *spec.shape)
        if self._debug:
            self._check_written(views)
        return count, views

    def commit_reads(self, n: int) -> None:
        """Mark ``n`` slots read once the copies already enqueued on the current stream complete."""
        if self._producer:
            raise SegmentError("commit_reads() is called on the producer end of a CudaIpcRing")
        slots = self._live_slots()
        available = self._cursors.write - self._issued
        if not 0 <= n <= available:
            raise RingLayoutError(
                f"commit_reads(n={n}) with {available} unread slots; commit at most what was read"
            )
        if n == 0:
            return
        stream = torch.cuda.current_stream(self._device)
        if self._debug:
            for offset in range(n):
                slot = slots[(self._issued + offset) % self._capacity]
                for _, spec, start, width in self._columns:
                    slot[:, start : start + width].fill_(float(spec.sentinel()))
        event = self._take_event()
        event.record(stream)
        self._issued += n
        self._pending.append((self._issued, event))
        self._flush()

    def _check_written(self, views: Mapping[str, Tensor]) -> None:
        unwritten: Tensor | None = None
        for name, spec, _, _ in self._columns:
            if spec.dtype == torch.bool or spec.numel == 0:
                continue
            flat = views[name].reshape(views[name].shape[0], self._layout.num_envs, -1)
            sentinel = float(spec.sentinel())
            rows = (flat.isnan() if sentinel != sentinel else flat == sentinel).all(dim=-1)
            unwritten = rows if unwritten is None else unwritten & rows
        if unwritten is not None and bool(unwritten.any()):  # a device sync: debug mode only
            slot, env = (int(i) for i in unwritten.nonzero()[0])
            raise UnwrittenSlotError(
                f"CudaIpcRing: slot at cursor {self._issued + slot}, env {env} holds the debug sentinels in "
                "every field: it was published before its copy landed, or read after commit"
            )
