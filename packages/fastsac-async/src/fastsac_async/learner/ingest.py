"""Drain: contiguous spans from every ring -> generations -> one ``extend_batch`` per field.

Ragged (``ragged=True``): each ring's span -> its env block, one ``extend_block`` (Note [ragged ingest]).

# Note [drain and commit]
Each :class:`RingReader` keeps the consumer's own counts: ``issued`` (slots handed to the
assembler) and ``committed`` (slots released to the producer). ``read_span`` of both ring kinds
starts at the consumer's committed position, so the reader skips the ``issued - committed`` slots it
already holds (Note [generation numbering] in ``assembler``). A slot is committed only after its
data was copied out of the ring:

* CPU learner: the shard views are copied into the replay buffer (or into a host staging batch when
  several rings form a generation) synchronously, then committed;
* CUDA learner, host rings: shards are copied (CPU memcpy) into a pinned staging batch, the slots are
  committed at once, and the staging batch goes to the replay buffer by a non-blocking H2D on a
  dedicated copy stream. Two staging buffers alternate; one is reused only after its copy event.
  Before the learner samples, the compute stream waits for the last copy event
  (:meth:`Ingestor.wait_before_sampling`); the copy stream waits for the compute stream before
  writing the replay storage, so an in-flight sample never reads a slot being overwritten;
* CUDA learner, CUDA-IPC rings: device-to-device copies on the compute stream; ``commit_reads``
  records its event after them (the ring publishes the cursor once that event completed).

# Note [ragged ingest]
With ``ragged=True`` nothing is assembled: each ring's new slots go straight to its collector's env
block of the replay buffer (``ReplayBuffer.extend_block``), which keeps a write count per block, and
are committed as above (host rings on a CUDA learner through two pinned buffers of their own). A slow
collector then delays only its own envs' data, and the fast collectors never wait for it; sampling
draws each env's steps from its own block's range. While every block holds the same count the buffer
is byte-identical to generation mode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from fastsac_async.learner.assembler import GenerationAssembler, ReadyRun
from fastsac_core import ReplayBuffer
from shm_transport import RingLayout, TransitionRing

__all__ = ["Ingestor", "RingReader", "Shard"]

Shard = dict[str, Tensor]
"""One ring's piece of some generations: field -> ``(k, envs_of_ring, ...)`` zero-copy view."""


def _take(shard: Shard, lo: int, hi: int) -> Shard:
    return {name: view[lo:hi] for name, view in shard.items()}


class RingReader:
    """The consumer's end of one ring, numbering slots by its own issued count.

    Args:
        ring: A host or CUDA-IPC ring (consumer side).
    """

    def __init__(self, ring: TransitionRing) -> None:
        self.ring = ring
        self.issued = 0
        self.committed = 0

    def take(self, max_slots: int) -> tuple[int, int, Shard]:
        """Up to ``max_slots`` new contiguous slots: ``(first generation, count, views)``."""
        held = self.issued - self.committed
        count, views = self.ring.read_span(held + max_slots)
        if count <= held:
            return self.issued, 0, {}
        first = self.issued
        self.issued += count - held
        return first, count - held, {name: view[held:count] for name, view in views.items()}

    def commit(self, n: int) -> None:
        """Release the ``n`` oldest held slots (their data has been copied out)."""
        self.ring.commit_reads(n)
        self.committed += n


def _staging(
    layout: RingLayout, slots: int, num_envs: int, *, pin: bool = False, device: torch.device | None = None
) -> dict[str, Tensor]:
    """A ``(slots, num_envs, ...)`` batch per field in the ring's dtypes (pinned host or on ``device``)."""
    return {
        name: torch.empty(
            (slots, num_envs, *layout.spec(name).shape),
            dtype=layout.spec(name).dtype,
            pin_memory=pin,
            device=device,
        )
        for name in layout.names
    }


def _extend(buffer: ReplayBuffer, fields: Shard, block: int | None = None) -> None:
    """One ``extend_batch`` (or ``extend_block`` of ``block``) from a ring's field dict."""
    if block is None:
        buffer.extend_batch(fields)
    else:
        buffer.extend_block(block, fields)


class Ingestor:
    """Drains a learner's rings into its replay buffer (see Note [drain and commit]).

    Args:
        rings: The learner's rings, in collector order.
        buffer: The learner's replay buffer (its ``num_envs`` is the sum of the rings' envs).
        max_ingest_per_iter: Slots taken per ring per drain (``AsyncOptions.max_ingest_per_iter``, >= 1).
        ragged: Ingest each ring's slots into its own env block as they come, instead of assembling
            generations (the buffer has one block per ring; Note [ragged ingest]).
    """

    def __init__(
        self,
        rings: Sequence[TransitionRing],
        buffer: ReplayBuffer,
        max_ingest_per_iter: int,
        *,
        ragged: bool = False,
    ) -> None:
        self.readers = [RingReader(r) for r in rings]
        self.buffer = buffer
        self.max_ingest = max_ingest_per_iter
        self.assembler: GenerationAssembler[Shard] = GenerationAssembler(len(rings), _take)
        layouts: list[RingLayout] = [r.layout for r in rings]
        if len({layout.names for layout in layouts}) > 1:
            raise ValueError(
                f"rings of one learner carry different fields {[lo.names for lo in layouts]}; "
                "build every ring of a learner from the same EnvDims (fastsac_async.transport.ring_layout)"
            )
        if ("critic_obs" in layouts[0].names) == buffer.shared_obs:
            raise ValueError(
                f"rings with fields {layouts[0].names} cannot fill a replay buffer with shared_obs="
                f"{buffer.shared_obs}; build rings and buffer from the same EnvDims (critic_obs_is_obs)"
            )
        self._widths = [layout.num_envs for layout in layouts]
        self._offsets = [sum(self._widths[:i]) for i in range(len(layouts))]
        self.ragged = ragged
        if ragged and buffer.blocks != tuple(self._widths):
            raise ValueError(
                f"ragged ingest needs a replay buffer with one env block per ring, {self._widths}; it has "
                f"blocks {list(buffer.blocks)} (build the agent with its collectors' env counts as blocks)"
            )
        self._device = buffer.device
        self._cuda = self._device.type == "cuda"
        self._single = len(rings) == 1
        self._staging: list[dict[str, Tensor]] = []
        self._staging_events: list[Any] = []
        self._next_staging = 0
        self._copy_stream: Any = None
        self._last_copy: Any = None
        self._pending_wait = False
        self.generations = 0
        """Generations ingested so far (ragged: the steps every env has gained, the fewest of any block)."""
        cap = max(r.capacity for r in rings)
        host_rings = any(r.device.type == "cpu" for r in rings)
        # Ragged ingest stages each host ring on its own: two pinned buffers per ring, alternating.
        self._ring_staging: list[list[dict[str, Tensor]]] = []
        self._ring_events: list[list[Any]] = []
        self._ring_next = [0] * len(rings)
        if self._cuda and host_rings:
            self._copy_stream = torch.cuda.Stream(device=self._device)  # type: ignore[no-untyped-call]
            if ragged:
                self._ring_staging = [
                    [_staging(layout, cap, layout.num_envs, pin=True) for _ in range(2)] for layout in layouts
                ]
                self._ring_events = [[None, None] for _ in rings]
            else:
                self._staging = [_staging(layouts[0], cap, sum(self._widths), pin=True) for _ in range(2)]
        elif not self._single and not ragged:
            self._staging = [_staging(layouts[0], cap, sum(self._widths), device=self._device)]
        self._staging_events = [None] * len(self._staging)

    def drain(self) -> int:
        """Take what every ring has, ingest every complete generation; returns generations ingested.

        Ragged: every ring's new slots go to its env block at once; returns the steps every env gained
        (0 while one ring is silent, though the others' slots were ingested: loop on ``unread()`` to
        drain everything).
        """
        if self.ragged:
            before = self.buffer.written
            for i, reader in enumerate(self.readers):
                first, count, views = reader.take(self.max_ingest)
                if count:
                    self._ingest_block(i, count, views)
            gained = self.buffer.written - before
            self.generations += gained
            return gained
        for i, reader in enumerate(self.readers):
            first, count, views = reader.take(self.max_ingest)
            if count:
                self.assembler.add(i, first, count, views)
        ingested = 0
        for run in self.assembler.pop_ready():
            self._ingest(run)
            ingested += run.count
        self.generations += ingested
        return ingested

    def drain_rest(self) -> int:
        """Ingest every slot the rings hold now, back-pressure or not (a stop); returns what ``drain`` did.

        At most the rounds that full rings need, so a collector still pushing cannot keep it going.
        A generation still missing a ring's slot stays held (nothing can complete it).
        """
        rounds = -(-max(r.ring.capacity for r in self.readers) // self.max_ingest) + 1
        ingested = 0
        for _ in range(rounds):
            if self.unread() == 0:
                break
            ingested += self.drain()
        return ingested

    def held(self) -> int:
        """Slots held (read, not yet committed) over all rings."""
        return sum(r.issued - r.committed for r in self.readers)

    def unread(self) -> int:
        """Slots written to the rings and not yet taken by this learner."""
        return sum(r.ring.size() - (r.issued - r.committed) for r in self.readers)

    def _ingest(self, run: ReadyRun[Shard]) -> None:
        k = run.count
        if self._single and self._copy_stream is None:
            # One ring: its views are the full batch (one copy, ring -> replay).
            _extend(self.buffer, run.pieces[0])
            self._commit(k)
            return
        staging = self._staging[self._next_staging]
        event = self._staging_events[self._next_staging]
        if event is not None:
            event.synchronize()  # the previous H2D out of this pinned buffer has finished
        for piece, off, width in zip(run.pieces, self._offsets, self._widths, strict=True):
            for name, view in piece.items():
                staging[name][:k, off : off + width].copy_(view, non_blocking=self._cuda)
        batch = {name: staged[:k] for name, staged in staging.items()}
        if self._copy_stream is None:
            _extend(self.buffer, batch)
            self._commit(k)
            return
        # Host rings on CUDA: the ring slots are free once in pinned staging (CPU copies above).
        self._commit(k)
        self._staging_events[self._next_staging] = self._on_copy_stream(lambda: _extend(self.buffer, batch))
        self._next_staging = (self._next_staging + 1) % len(self._staging)

    def _ingest_block(self, ring: int, k: int, views: Shard) -> None:
        """Ring ``ring``'s ``k`` new slots into its env block (Note [ragged ingest])."""
        reader = self.readers[ring]
        if self._copy_stream is None or reader.ring.device.type != "cpu":
            # CPU learner (a synchronous copy), or device (CUDA-IPC) views (D2D on the compute stream,
            # which commit_reads orders its event after).
            _extend(self.buffer, views, ring)
            reader.commit(k)
            return
        parity = self._ring_next[ring]
        staging, event = self._ring_staging[ring][parity], self._ring_events[ring][parity]
        if event is not None:
            event.synchronize()  # the previous H2D out of this pinned buffer has finished
        for name, view in views.items():
            staging[name][:k].copy_(view)
        reader.commit(k)  # the ring's slots are free once in pinned staging
        batch = {name: staged[:k] for name, staged in staging.items()}
        self._ring_events[ring][parity] = self._on_copy_stream(lambda: _extend(self.buffer, batch, ring))
        self._ring_next[ring] = 1 - parity

    def _on_copy_stream(self, extend: Callable[[], None]) -> Any:
        """Run ``extend`` (H2D from pinned staging) on the copy stream; returns its completion event.

        The copy stream first waits for the compute stream (an in-flight sample must not read a row
        being overwritten), and the next ``wait_before_sampling`` orders the compute stream after it.
        """
        self._copy_stream.wait_stream(torch.cuda.current_stream(self._device))
        with torch.cuda.stream(self._copy_stream):
            extend()
            done = torch.cuda.Event()  # type: ignore[no-untyped-call]
            done.record(self._copy_stream)
        self._last_copy = done
        self._pending_wait = True
        return done

    def _commit(self, k: int) -> None:
        for reader in self.readers:
            reader.commit(k)

    def wait_before_sampling(self) -> None:
        """Order the compute stream after the last H2D into the replay buffer (no host sync)."""
        if self._pending_wait and self._last_copy is not None:
            torch.cuda.current_stream(self._device).wait_event(self._last_copy)
            self._pending_wait = False

    def wait_ingest(self) -> None:
        """Block until every issued copy into the replay buffer has landed (before a checkpoint)."""
        if self._last_copy is not None:
            self._last_copy.synchronize()
        if self._cuda:
            torch.cuda.current_stream(self._device).synchronize()
