"""Weight publishing that keeps the learner's GPU queue fed: snapshot now, hand over once it landed.

# Note [Deferred publish]

A weight writer needs its sources *finished*: the host writer copies them to pinned memory and
synchronises, the CUDA-IPC writer event-synchronises its device copy. Called right after an update
chunk was launched, either wait blocks the host until the GPU has run that whole chunk, and the GPU
then idles while the host drains rings and decides the next chunk: one bubble per publish.

``DeferredPublisher`` splits a publish in two. ``begin`` takes the snapshot tensors (written on the
learner's stream after the chunk) and records an event behind them; the host moves on and launches
the next chunk. ``finish`` runs once that event has completed (polled without blocking between
chunks, or waited for when the next snapshot is due): it hands the snapshot to every writer inside a
dedicated stream, so a writer's own "wait for the current stream" covers only its copy, never the
chunks queued since. The snapshot tensors stay referenced until then, so the caching allocator cannot
reuse them, and the caller must not write them again before ``finish``: the learner finishes the
previous snapshot before it flattens the next one into the same buffer. On CPU there is no queue to
keep fed: ``begin`` publishes at once.

A rank has one host writer per collector (14 in the headline run). Each would copy a CUDA snapshot to
its own pinned staging and synchronise; ``finish`` instead copies the snapshot to host once and hands
every host writer that host copy (a host source goes straight into the channel's slot). CUDA-IPC
writers get the device snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from shm_transport import WeightWriter

__all__ = ["DeferredPublisher"]


class DeferredPublisher:
    """Publishes snapshots to a rank's weight writers once they have landed (Note [Deferred publish]).

    Args:
        writers: The rank's weight writers, one per collector.
        device: Where the snapshots are computed (the learner's device).
    """

    def __init__(self, writers: Sequence[WeightWriter], device: torch.device) -> None:
        self._writers = list(writers)
        self._cuda = device.type == "cuda"
        self._device = device
        self._stream = torch.cuda.Stream(device=device) if self._cuda else None  # type: ignore[no-untyped-call]
        self._pending: tuple[Tensor, Mapping[str, Tensor], torch.cuda.Event | None] | None = None
        self._version = 0
        self._host: tuple[Tensor, dict[str, Tensor]] | None = None  # pinned copy of a CUDA snapshot

    @property
    def version(self) -> int:
        """Version of the last snapshot handed to the writers (0: none yet)."""
        return self._version

    @property
    def pending(self) -> bool:
        """Whether a snapshot was begun and not yet handed to the writers."""
        return self._pending is not None

    def begin(self, flat_params: Tensor, extras: Mapping[str, Tensor]) -> None:
        """Take a snapshot whose sources were just written on the current stream (never blocks on it).

        A snapshot still pending is finished first (waiting for it if needed): one at a time.
        """
        self.finish(block=True)
        event = None
        if self._cuda:
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(torch.cuda.current_stream(self._device))
        self._pending = (flat_params, dict(extras), event)
        if event is None:
            self.finish(block=True)

    def finish(self, *, block: bool) -> bool:
        """Hand the pending snapshot to every writer once it has landed; True if it was handed over.

        With ``block=False`` nothing waits: a snapshot whose event has not completed stays pending.
        """
        if self._pending is None:
            return False
        flat, extras, event = self._pending
        if event is None:
            self._publish(flat, extras)
        else:
            if not block and not event.query():  # type: ignore[no-untyped-call]
                return False
            event.synchronize()
            with torch.cuda.stream(self._stream):
                self._publish(flat, extras)
        self._pending = None
        return True

    def _publish(self, flat: Tensor, extras: Mapping[str, Tensor]) -> None:
        host: tuple[Tensor, Mapping[str, Tensor]] | None = None
        for writer in self._writers:
            if flat.is_cuda and writer.device.type == "cpu":
                if host is None:
                    host = self._host_copy(flat, extras)
                self._version = writer.publish(*host)
            else:
                self._version = writer.publish(flat, extras)

    def _host_copy(self, flat: Tensor, extras: Mapping[str, Tensor]) -> tuple[Tensor, Mapping[str, Tensor]]:
        """The snapshot in pinned host memory: one copy and one wait on the current (publisher) stream.

        Reused by every publish: the writers are done with it when ``_publish`` returns.
        """
        if self._host is None:
            self._host = (
                torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True),
                {k: torch.empty(v.shape, dtype=v.dtype, pin_memory=True) for k, v in extras.items()},
            )
        host_flat, host_extras = self._host
        host_flat.copy_(flat, non_blocking=True)
        for name, tensor in extras.items():
            host_extras[name].copy_(tensor, non_blocking=True)
        torch.cuda.current_stream(self._device).synchronize()
        return host_flat, host_extras
