"""How long the GPU spent on spans of queued work, read without ever synchronising.

A GPU learner's ``update`` only *queues* work (compiled CUDA-graph replays): host time inside it says
little about how busy the GPU was, and once publishing no longer synchronises (Note [Deferred
publish]) the host's waits move elsewhere. ``DeviceSpanTimer`` brackets each span with timing events
on the current stream and adds up the spans whose end event has completed, so ``learn_pct`` on a GPU
is device time in updates over wall time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["DeviceSpanTimer"]


class DeviceSpanTimer:
    """Device-side seconds of ``span`` bodies on a CUDA device; disabled (always 0) elsewhere.

    Args:
        device: The device whose current stream the spans run on.
    """

    def __init__(self, device: torch.device) -> None:
        self.enabled = device.type == "cuda"
        """Whether spans are timed (CUDA devices only)."""
        self._device = device
        self._open: deque[tuple[torch.cuda.Event, torch.cuda.Event]] = deque()

    @contextmanager
    def span(self) -> Iterator[None]:
        """Time the GPU work the ``with`` body queues on the current stream (no host synchronisation)."""
        if not self.enabled:
            yield
            return
        stream = torch.cuda.current_stream(self._device)
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record(stream)
        try:
            yield
        finally:
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end.record(stream)
            self._open.append((start, end))

    def collect(self) -> float:
        """Seconds of the spans completed since the last call (spans still running stay for the next)."""
        total_ms = 0.0
        while self._open and self._open[0][1].query():  # type: ignore[no-untyped-call]
            start, end = self._open.popleft()
            total_ms += start.elapsed_time(end)
        return total_ms / 1e3
