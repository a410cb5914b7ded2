"""``HostRing``: a lock-free SPSC ring of transition slots in one host shared-memory segment.

# Note [Ring memory ordering]

The ring has no locks and no fences. It is correct because of four facts, all of which this module
relies on (the code that does points here):

1. **One writer per cursor.** Only the producer stores the write cursor (header counter A) and only
   the consumer stores the read cursor (counter B). Each side reads the other's cursor, never
   writes it, so no read-modify-write has to be atomic.
2. **Aligned 8-byte stores and loads are single-copy atomic on x86-64.** Both cursors are int64 at
   8-byte-aligned offsets (Note [Segment header layout]); they are accessed through a ``memoryview``
   of format ``q`` whose item get/set is one 8-byte ``mov`` (CPython copies the item with a
   fixed-size ``memcpy``). A reader never sees half a cursor.
3. **x86-TSO keeps stores in order and loads in order.** The producer copies a slot's data (``copy_``
   on the slot's views) and only then stores ``write + 1``: the stores reach other cores in program
   order, so a consumer that loads the new cursor and then loads the slot sees the data. The consumer
   copies a span out (loads) and only then stores the new read cursor: x86 never makes a store
   visible before an earlier load, so the producer cannot overwrite a slot the consumer is still
   reading. x86 is multi-copy atomic, so this holds even when ``copy_`` splits a large copy across
   torch's intra-op threads: those threads finish (and synchronise with the calling thread) before
   ``copy_`` returns, and TSO's causality makes their stores visible before the cursor store.
4. **The copies complete before the cursor store is issued.** ``Tensor.copy_`` into host memory is
   synchronous, including a copy from a CUDA tensor (``non_blocking`` is never used on the host ring),
   and the cursor store is a separate, later Python statement; neither the compiler nor the
   interpreter can move a store across the opaque calls in between.

On every other architecture (ARM64, POWER, RISC-V) stores and loads may be reordered and Python has
no release/acquire primitive, so ``create``/``attach`` refuse to run with ``UnsupportedPlatformError``
(``_platform.check_store_order_platform``) rather than make the ordering explicit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import NoReturn

import torch
from torch import Tensor

from shm_transport._layout import RingLayout, align_up
from shm_transport._platform import check_store_order_platform
from shm_transport._segment import COUNTER_A, COUNTER_B, HEADER_NBYTES, KIND_RING, Segment
from shm_transport._waiting import BlockingRingOps
from shm_transport.exceptions import RingLayoutError, SegmentError, UnwrittenSlotError

__all__ = ["HostRing", "HostRingHandle"]


@dataclass(frozen=True)
class HostRingHandle:
    """What another process needs to attach a ``HostRing``: names and sizes, never contents."""

    name: str
    """Segment name in /dev/shm (``shmtx-<creator pid>-<hex>``)."""
    layout: RingLayout
    """Fields of one slot."""
    capacity: int
    """Number of slots."""
    debug: bool
    """Whether the ring checks for unwritten (sentinel) rows on read."""

    def open_producer(self) -> HostRing:
        """Attach the producer end here (Note [Handles open their own end] in ``_protocol``)."""
        return HostRing.attach(self)


def _ring_nbytes(layout: RingLayout, capacity: int) -> int:
    return HEADER_NBYTES + sum(layout.field_region_nbytes(name, capacity) for name in layout.names)


class HostRing(BlockingRingOps):
    """SPSC transition ring in host shared memory (see Note [Ring memory ordering]).

    Create it in the parent with ``HostRing.create``, pass ``ring.handle`` to the producer and the
    consumer, which call ``HostRing.attach``; every process calls ``close()``, the creator also
    ``unlink()``. The same object can be used by a producer thread and a consumer thread.
    """

    def __init__(self, segment: Segment, layout: RingLayout, capacity: int, debug: bool) -> None:
        self._segment = segment
        self._layout = layout
        self._capacity = capacity
        self._debug = debug
        self._names = layout.names
        self._words: memoryview | None = segment.words
        self._regions: dict[str, Tensor] = {}
        offset = HEADER_NBYTES
        for name, spec in layout.fields:
            nbytes = capacity * layout.field_nbytes(name)
            region = segment.data[offset : offset + nbytes].view(spec.dtype)
            self._regions[name] = region.view(capacity, layout.num_envs, *spec.shape)
            offset += align_up(nbytes)
        # One list of per-field views per slot, built once: push does no indexing or allocation.
        self._slot_views: list[tuple[Tensor, ...]] = [
            tuple(self._regions[name][slot] for name in self._names) for slot in range(capacity)
        ]

    # ----------------------------------------------------------------------------------- lifecycle
    @staticmethod
    def nbytes(layout: RingLayout, capacity: int) -> int:
        """Bytes of the shared-memory segment :meth:`create` makes for ``layout`` and ``capacity``."""
        return _ring_nbytes(layout, capacity)

    @classmethod
    def create(cls, layout: RingLayout, capacity: int, *, debug: bool = False) -> HostRing:
        """Create a ring (in the parent process, which becomes the creator and must ``unlink`` it).

        Args:
            layout: fields of one slot.
            capacity: number of slots, >= 1.
            debug: fill slots with sentinels on creation and after each commit, and raise
                ``UnwrittenSlotError`` when ``read_span`` returns a row that was never written.

        Raises:
            UnsupportedPlatformError: not on x86-64 (Note [Ring memory ordering]).
            RingLayoutError: ``capacity < 1``.
            SegmentError: /dev/shm is missing or too small.
        """
        check_store_order_platform("HostRing.create")
        if capacity < 1:
            raise RingLayoutError(f"HostRing capacity={capacity} must be >= 1 (ring_capacity in the config)")
        segment = Segment.create(
            _ring_nbytes(layout, capacity),
            kind=KIND_RING,
            capacity=capacity,
            fingerprint=layout.fingerprint(),
            debug=debug,
        )
        ring = cls(segment, layout, capacity, debug)
        if debug:
            for name, spec in layout.fields:
                ring._regions[name].fill_(spec.sentinel())
        return ring

    @classmethod
    def attach(cls, handle: HostRingHandle) -> HostRing:
        """Attach to a ring another process created; call ``close()`` when done (never ``unlink``)."""
        check_store_order_platform("HostRing.attach")
        segment = Segment.attach(
            handle.name, kind=KIND_RING, capacity=handle.capacity, fingerprint=handle.layout.fingerprint()
        )
        return cls(segment, handle.layout, handle.capacity, handle.debug)

    @property
    def handle(self) -> HostRingHandle:
        """A picklable handle for ``HostRing.attach`` in another process."""
        return HostRingHandle(self._segment.name, self._layout, self._capacity, self._debug)

    def producer_handle(self) -> HostRingHandle:
        """The handle to ship to the producer: the ring's own handle."""
        return self.handle

    def close(self, *, timeout_s: float = 10.0) -> None:
        """Drop this process's mapping (idempotent, never waits: ``timeout_s`` is unused).

        Views from ``read_span`` stay valid while alive.
        """
        self._words = None
        self._slot_views = []
        self._regions = {}
        self._segment.close()

    def unlink(self) -> None:
        """Remove the segment's name; the creator calls it once, after every process attached."""
        self._segment.unlink()

    def __enter__(self) -> HostRing:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
        if self._segment.creator:
            self.unlink()

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "a HostRing is not picklable: send ring.handle and call HostRing.attach(handle) there"
        )

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
        """``cpu``: the slots are host shared memory."""
        return torch.device("cpu")

    @property
    def name(self) -> str:
        """The segment name."""
        return self._segment.name

    def _cursors(self) -> memoryview:
        words = self._words
        if words is None:
            raise SegmentError(f"HostRing {self._segment.name!r} is closed in this process; attach it again")
        return words

    @property
    def write_count(self) -> int:
        """Slots published so far (the write cursor)."""
        return int(self._cursors()[COUNTER_A])

    @property
    def read_count(self) -> int:
        """Slots committed as read so far (the read cursor)."""
        return int(self._cursors()[COUNTER_B])

    def size(self) -> int:
        """Slots written and not yet committed."""
        words = self._cursors()
        read = words[COUNTER_B]
        return int(words[COUNTER_A] - read)

    def is_full(self) -> bool:
        """Whether a push would return False now."""
        return self.size() >= self._capacity

    @property
    def fill(self) -> float:
        """``size() / capacity`` (the ``async/ring_fill`` metric)."""
        return self.size() / self._capacity

    # ---------------------------------------------------------------------------------- producer
    def push(self, fields: Mapping[str, Tensor]) -> bool:
        """Copy one slot in and publish it; False (nothing written) when the ring is full.

        Args:
            fields: one tensor per layout field, shaped ``(num_envs, *shape)``, on any device, of a
                dtype that casts to the field's without changing kind (``RingLayout.check_push``).

        Raises:
            RingLayoutError: a field is missing, not a tensor, or has the wrong shape or a dtype of a
                higher kind than the field's (nothing is published).
        """
        words = self._cursors()
        write = words[COUNTER_A]
        if write - words[COUNTER_B] >= self._capacity:
            return False
        self._layout.check_push(fields)
        for name, view in zip(self._names, self._slot_views[write % self._capacity], strict=True):
            view.copy_(fields[name])
        # Publish only after every copy_ above returned: Note [Ring memory ordering], facts 3 and 4.
        words[COUNTER_A] = write + 1
        return True

    def flush(self) -> None:
        """Nothing to wait for: ``push`` publishes each slot before it returns."""

    # ---------------------------------------------------------------------------------- consumer
    def read_span(self, max_slots: int) -> tuple[int, dict[str, Tensor]]:
        """Zero-copy views of the longest contiguous run of unread slots, never wrapping.

        Returns ``(k, {name: view (k, num_envs, *shape)})``, ``k <= max_slots``; ``(0, {})`` when
        empty. The read cursor does not move: copy the data out, then ``commit_reads(k)``. The views
        must not be used after that commit (the producer may overwrite the slots).

        Raises:
            UnwrittenSlotError: in debug mode, a returned row still holds the sentinels.
        """
        words = self._cursors()
        read = words[COUNTER_B]
        available = words[COUNTER_A] - read  # load order: Note [Ring memory ordering], fact 3
        if available <= 0 or max_slots <= 0:
            return 0, {}
        slot = read % self._capacity
        count = min(available, self._capacity - slot, max_slots)
        views = {name: region[slot : slot + count] for name, region in self._regions.items()}
        if self._debug:
            self._check_written(views, read)
        return count, views

    def commit_reads(self, n: int) -> None:
        """Hand the ``n`` oldest unread slots back to the producer (after copying them out).

        Raises:
            RingLayoutError: ``n`` is negative or larger than ``size()``.
        """
        words = self._cursors()
        read = words[COUNTER_B]
        available = words[COUNTER_A] - read
        if not 0 <= n <= available:
            raise RingLayoutError(
                f"commit_reads(n={n}) with {available} unread slots; commit at most what was read"
            )
        if self._debug:
            self._refill_sentinels(read, n)
        # After the caller's copies out (loads) returned: Note [Ring memory ordering], fact 3.
        words[COUNTER_B] = read + n

    # ------------------------------------------------------------------------------------- debug
    def _check_written(self, views: Mapping[str, Tensor], first_cursor: int) -> None:
        unwritten: Tensor | None = None
        for name, spec in self._layout.fields:
            if spec.dtype == torch.bool or spec.numel == 0:
                continue  # a bool has no value that cannot also be real data
            flat = views[name].reshape(views[name].shape[0], self._layout.num_envs, -1)
            sentinel = spec.sentinel()
            is_sentinel = (
                flat.isnan() if isinstance(sentinel, float) and math.isnan(sentinel) else flat == sentinel
            )
            rows = is_sentinel.all(dim=-1)
            unwritten = rows if unwritten is None else unwritten & rows
        if unwritten is not None and bool(unwritten.any()):
            slot, env = (int(i) for i in unwritten.nonzero()[0])
            raise UnwrittenSlotError(
                f"HostRing {self._segment.name!r}: slot at cursor {first_cursor + slot} (index "
                f"{(first_cursor + slot) % self._capacity}), env {env} holds the debug sentinels in every "
                "field: it was published without being written (a producer bug) or read after commit"
            )

    def _refill_sentinels(self, first_cursor: int, n: int) -> None:
        for offset in range(n):
            for (_, spec), view in zip(
                self._layout.fields, self._slot_views[(first_cursor + offset) % self._capacity], strict=True
            ):
                view.fill_(spec.sentinel())
