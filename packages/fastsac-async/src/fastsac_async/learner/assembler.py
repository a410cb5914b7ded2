"""Generation assembly: one slot from every ring of a learner makes one full env batch.

# Note [generation numbering]
Collector ``i`` owns env block ``i``; its ring's ``k``-th slot (counted from the start of the run)
holds env block ``i`` of env step ``k``. Every ring starts at slot 0 in the same run (the boot
barrier releases all collectors together), so generation ``k`` is complete once every ring has
delivered its ``k``-th slot. The learner numbers the slots it takes from a ring with its OWN count
of issued reads (the slots handed to the assembler so far), never with a shared cursor: a published
read cursor may lag the reads already issued (a CUDA-IPC ring publishes it only after the copy
event completes), and numbering from it would place a shard at a generation it already had (the
public reference stalled this way).

The assembler holds spans (zero-copy views into ring slots, not yet committed), so the memory it
holds is bounded by the rings' capacities; a slow ring delays only the generations it has not
delivered, and the fast rings fill up and back-pressure their own collectors.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from fastsac_async.exceptions import AsyncEngineError

__all__ = ["GenerationAssembler", "ReadyRun"]

S = TypeVar("S")


@dataclass(frozen=True)
class ReadyRun(Generic[S]):
    """Consecutive complete generations ``[first, first + count)``: one span piece per ring.

    ``pieces[i]`` is ring ``i``'s part of these generations (``count`` slots, contiguous in its ring).
    """

    first: int
    """Absolute number of the first generation."""
    count: int
    """Number of generations in the run."""
    pieces: tuple[S, ...]
    """Per ring (in collector order), its ``count`` slots."""


@dataclass
class _Span(Generic[S]):
    start: int
    count: int
    payload: S


class GenerationAssembler(Generic[S]):
    """Places ring spans at absolute generation numbers and pops complete generations in order.

    Args:
        num_rings: Rings (collectors) of the learner.
        take: ``take(payload, lo, hi)`` returns slots ``[lo, hi)`` of a span payload (a zero-copy
            slice). See Note [generation numbering].
    """

    def __init__(self, num_rings: int, take: Callable[[S, int, int], S]) -> None:
        if num_rings < 1:
            raise AsyncEngineError(f"GenerationAssembler needs num_rings >= 1, got {num_rings}")
        self._take = take
        self._spans: list[deque[_Span[S]]] = [deque() for _ in range(num_rings)]
        self._delivered = [0] * num_rings
        self._next = 0

    @property
    def num_rings(self) -> int:
        """Number of rings."""
        return len(self._spans)

    @property
    def next_generation(self) -> int:
        """Number of the oldest generation not yet popped."""
        return self._next

    def delivered(self, ring: int) -> int:
        """Slots ring ``ring`` has delivered so far (its issued-read count); its next span's start."""
        return self._delivered[ring]

    def held(self, ring: int) -> int:
        """Slots of ring ``ring`` held here, not yet popped (they are not committed in the ring)."""
        return self._delivered[ring] - self._next

    def add(self, ring: int, start: int, count: int, payload: S) -> None:
        """Place ``count`` consecutive slots of ``ring`` at generations ``[start, start + count)``.

        Raises:
            AsyncEngineError: ``start`` is not the ring's next undelivered generation (a gap or a
                repeat would corrupt the replay order).
        """
        if start != self._delivered[ring]:
            raise AsyncEngineError(
                f"ring {ring} delivered generation {start} but {self._delivered[ring]} was expected; "
                "spans must be numbered from the consumer's issued read count (Note [generation numbering])"
            )
        if count <= 0:
            return
        self._spans[ring].append(_Span(start, count, payload))
        self._delivered[ring] += count

    def ready(self) -> int:
        """Number of complete generations waiting to be popped."""
        return min(self._delivered) - self._next

    def pop_ready(self, max_generations: int | None = None) -> list[ReadyRun[S]]:
        """Pop consecutive complete generations (at most ``max_generations``) as runs.

        Each run is as long as possible while every ring's piece stays one contiguous span.
        """
        end = min(self._delivered)
        if max_generations is not None:
            end = min(end, self._next + max_generations)
        runs: list[ReadyRun[S]] = []
        while self._next < end:
            step = end - self._next
            for spans in self._spans:
                head = spans[0]
                step = min(step, head.start + head.count - self._next)
            pieces = []
            for spans in self._spans:
                head = spans[0]
                lo = self._next - head.start
                if lo == 0 and step == head.count:
                    pieces.append(head.payload)
                else:
                    pieces.append(self._take(head.payload, lo, lo + step))
                if head.start + head.count == self._next + step:
                    spans.popleft()
            runs.append(ReadyRun(self._next, step, tuple(pieces)))
            self._next += step
        return runs
