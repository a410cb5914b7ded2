import numpy as np
import pytest

from fastsac_async.exceptions import AsyncEngineError
from fastsac_async.learner.assembler import GenerationAssembler


def _take(payload: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return payload[lo:hi]


def _span(ring: int, start: int, count: int) -> np.ndarray:
    """Slots tagged (ring, generation) so pieces can be checked."""
    return np.array([[ring, g] for g in range(start, start + count)])


def test_pop_ready_waits_for_every_ring_and_returns_generations_in_order() -> None:
    """A generation pops only once every ring delivered it, in increasing order."""
    asm: GenerationAssembler[np.ndarray] = GenerationAssembler(3, _take)
    asm.add(0, 0, 4, _span(0, 0, 4))
    asm.add(1, 0, 2, _span(1, 0, 2))
    assert asm.pop_ready() == []
    asm.add(2, 0, 3, _span(2, 0, 3))
    runs = asm.pop_ready()
    assert [(r.first, r.count) for r in runs] == [(0, 2)]
    for ring, piece in enumerate(runs[0].pieces):
        assert piece.tolist() == [[ring, 0], [ring, 1]]
    asm.add(1, 2, 3, _span(1, 2, 3))
    runs = asm.pop_ready()
    assert [(r.first, r.count) for r in runs] == [(2, 1)]
    assert asm.held(0) == 1 and asm.held(1) == 2 and asm.held(2) == 0


def test_runs_split_where_a_ring_span_ends() -> None:
    """Each ring's piece of a run is one contiguous span slice."""
    asm: GenerationAssembler[np.ndarray] = GenerationAssembler(2, _take)
    asm.add(0, 0, 2, _span(0, 0, 2))
    asm.add(0, 2, 3, _span(0, 2, 3))
    asm.add(1, 0, 5, _span(1, 0, 5))
    runs = asm.pop_ready()
    assert [(r.first, r.count) for r in runs] == [(0, 2), (2, 3)]
    gens = [g for r in runs for g in r.pieces[1][:, 1].tolist()]
    assert gens == [0, 1, 2, 3, 4]


def test_pop_ready_respects_max_generations() -> None:
    """At most max_generations are popped; the rest stay for the next call."""
    asm: GenerationAssembler[np.ndarray] = GenerationAssembler(1, _take)
    asm.add(0, 0, 5, _span(0, 0, 5))
    assert sum(r.count for r in asm.pop_ready(3)) == 3
    assert asm.next_generation == 3
    assert sum(r.count for r in asm.pop_ready()) == 2


def test_out_of_order_span_is_rejected() -> None:
    """A span that skips or repeats a generation is an error, not silent corruption."""
    asm: GenerationAssembler[np.ndarray] = GenerationAssembler(2, _take)
    asm.add(0, 0, 2, _span(0, 0, 2))
    with pytest.raises(AsyncEngineError, match="issued read count"):
        asm.add(0, 0, 1, _span(0, 0, 1))
    with pytest.raises(AsyncEngineError):
        asm.add(1, 3, 1, _span(1, 3, 1))


def test_random_arrival_orders_produce_every_generation_once() -> None:
    """Whatever the interleaving of span arrivals, each generation pops exactly once with all rings."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        rings = int(rng.integers(1, 5))
        asm: GenerationAssembler[np.ndarray] = GenerationAssembler(rings, _take)
        seen: list[int] = []
        for _ in range(40):
            ring = int(rng.integers(rings))
            count = int(rng.integers(0, 4))
            start = asm.delivered(ring)
            asm.add(ring, start, count, _span(ring, start, count))
            for run in asm.pop_ready():
                for ring_i, piece in enumerate(run.pieces):
                    assert piece[:, 0].tolist() == [ring_i] * run.count
                    assert piece[:, 1].tolist() == list(range(run.first, run.first + run.count))
                seen.extend(range(run.first, run.first + run.count))
        assert seen == list(range(min(asm.delivered(r) for r in range(rings))))
