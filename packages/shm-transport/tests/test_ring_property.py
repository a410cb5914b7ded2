from collections import deque

import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import shm_transport._segment as seg
from shm_transport import HostRing, RingLayout

LAYOUT = RingLayout.of(2, {"v": ((), torch.int64), "w": ((3,), torch.float32)})


class RingModel(RuleBasedStateMachine):
    """HostRing against a deque: pushes, spans, commits, full/empty, wrap, from arbitrary cursor offsets."""

    def __init__(self) -> None:
        super().__init__()
        self.ring: HostRing | None = None
        self.model: deque[int] = deque()
        self.next_value = 0

    @initialize(capacity=st.integers(1, 7), start=st.integers(0, 2**40), debug=st.booleans())
    def create(self, capacity: int, start: int, debug: bool) -> None:
        self.ring = HostRing.create(LAYOUT, capacity, debug=debug)
        # A ring that already ran for `start` slots: both cursors moved together.
        self.ring._segment.words[seg.COUNTER_A] = start
        self.ring._segment.words[seg.COUNTER_B] = start
        self.capacity = capacity

    @rule()
    def push(self) -> None:
        assert self.ring is not None
        value = self.next_value
        fields = {"v": torch.full((2,), value), "w": torch.full((2, 3), float(value))}
        accepted = self.ring.push(fields)
        assert accepted == (len(self.model) < self.capacity)
        if accepted:
            self.model.append(value)
            self.next_value += 1

    @rule(max_slots=st.integers(0, 9), commit_fraction=st.floats(0, 1))
    def read_and_commit(self, max_slots: int, commit_fraction: float) -> None:
        assert self.ring is not None
        count, views = self.ring.read_span(max_slots)
        start_slot = self.ring.read_count % self.capacity
        expected = min(len(self.model), self.capacity - start_slot, max_slots)
        assert count == expected
        if count == 0:
            assert views == {}
            return
        assert views["v"][:, 0].tolist() == list(self.model)[:count]
        assert views["w"][:, 1, 2].tolist() == [float(v) for v in list(self.model)[:count]]
        committed = int(commit_fraction * count)
        self.ring.commit_reads(committed)
        for _ in range(committed):
            self.model.popleft()

    @precondition(lambda self: self.ring is not None)
    @invariant()
    def cursors_agree_with_model(self) -> None:
        assert self.ring is not None
        assert self.ring.size() == len(self.model)
        assert self.ring.is_full() == (len(self.model) == self.capacity)
        assert 0 <= self.ring.write_count - self.ring.read_count <= self.capacity

    def teardown(self) -> None:
        if self.ring is not None:
            self.ring.close()
            self.ring.unlink()


RingModel.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
test_ring_against_deque = RingModel.TestCase
