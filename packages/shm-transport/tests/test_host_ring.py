import pickle
from collections.abc import Iterator

import numpy as np
import pytest
import torch

import shm_transport._segment as seg
from shm_transport import HostRing, RingLayout, RingProducerHandle, TransitionRing, default_prefix
from shm_transport.exceptions import (
    RingLayoutError,
    SegmentError,
    UnsupportedPlatformError,
    UnwrittenSlotError,
)


def _layout(num_envs: int, act: int = 2) -> RingLayout:
    """A slot of float vectors, a float scalar and two byte flags (the mix a transition ring carries)."""
    return RingLayout.of(
        num_envs,
        {
            "obs": ((3,), torch.float32),
            "state": ((5,), torch.float32),
            "actions": ((act,), torch.float32),
            "rewards": ((), torch.float32),
            "flag": ((), torch.uint8),
            "mask": ((), torch.uint8),
        },
    )


LAYOUT = _layout(4)


def _slot(value: float) -> dict[str, torch.Tensor]:
    return {
        "obs": torch.full((4, 3), value),
        "state": torch.full((4, 5), value),
        "actions": torch.full((4, 2), value, dtype=torch.float64),  # castable dtype
        "rewards": torch.full((4,), value),
        "flag": torch.ones(4, dtype=torch.bool),  # castable dtype
        "mask": torch.zeros(4, dtype=torch.uint8),
    }


@pytest.fixture
def ring() -> Iterator[HostRing]:
    ring = HostRing.create(LAYOUT, capacity=4)
    yield ring
    ring.close()
    ring.unlink()


def test_satisfies_protocol_and_names_segment(ring: HostRing) -> None:
    """HostRing implements TransitionRing and its segment name carries the prefix and creator pid."""
    import os

    assert isinstance(ring, TransitionRing)
    assert ring.name.startswith(f"{default_prefix()}{os.getpid()}-")
    assert (seg.SHM_DIR / ring.name).exists()


def test_nbytes_is_the_size_of_the_segment_create_makes(ring: HostRing) -> None:
    """HostRing.nbytes(layout, capacity) is the file size of the ring's segment in /dev/shm."""
    assert HostRing.nbytes(LAYOUT, 4) == (seg.SHM_DIR / ring.name).stat().st_size
    assert HostRing.nbytes(LAYOUT, 8) > HostRing.nbytes(LAYOUT, 4)


def test_the_producer_handle_opens_a_producer_end_of_the_same_ring(ring: HostRing) -> None:
    """``producer_handle()`` pickles, and its ``open_producer()`` pushes into this ring; slots are on cpu."""
    handle = pickle.loads(pickle.dumps(ring.producer_handle()))
    assert isinstance(handle, RingProducerHandle)
    producer = handle.open_producer()
    try:
        assert producer.device == ring.device == torch.device("cpu")
        assert producer.push(_slot(7.0))
        count, views = ring.read_span(4)
        assert count == 1 and float(views["obs"][0, 0, 0]) == 7.0
    finally:
        producer.close(timeout_s=0.0)


def test_full_ring_refuses_and_writes_nothing(ring: HostRing) -> None:
    """A push returns False on a full ring and leaves the oldest slot untouched."""
    for value in range(4):
        assert ring.push(_slot(float(value)))
    assert ring.is_full() and ring.size() == 4 and ring.fill == 1.0
    assert not ring.push(_slot(99.0))
    count, views = ring.read_span(1)
    assert count == 1 and float(views["obs"][0, 0, 0]) == 0.0
    assert ring.write_count == 4 and ring.read_count == 0


def test_read_span_never_wraps_and_commit_frees(ring: HostRing) -> None:
    """read_span stops at the end of the buffer; after commit the producer reuses the slots."""
    for value in range(4):
        ring.push(_slot(float(value)))
    ring.commit_reads(ring.read_span(3)[0])
    ring.push(_slot(4.0))
    ring.push(_slot(5.0))
    count, views = ring.read_span(10)
    assert count == 1 and float(views["rewards"][0, 0]) == 3.0  # slot 3 only: no wrap
    ring.commit_reads(1)
    count, views = ring.read_span(10)
    assert count == 2 and views["rewards"][:, 0].tolist() == [4.0, 5.0]
    assert views["flag"].dtype == torch.uint8 and views["flag"].shape == (2, 4)


def test_empty_ring_returns_zero(ring: HostRing) -> None:
    """An empty ring gives k=0 and no views; a blocking read times out promptly."""
    assert ring.read_span(8) == (0, {})
    assert ring.read_span_blocking(8, timeout_s=0.05) == (0, {})


def test_blocking_push_times_out_and_stops(ring: HostRing) -> None:
    """push_blocking on a full ring returns False on timeout and when should_stop is true."""
    for value in range(4):
        ring.push(_slot(float(value)))
    assert not ring.push_blocking(_slot(0.0), timeout_s=0.05)
    assert not ring.push_blocking(_slot(0.0), timeout_s=60.0, should_stop=lambda: True)


def test_bad_fields_raise_and_publish_nothing(ring: HostRing) -> None:
    """A missing field or a wrong shape raises RingLayoutError and the cursor stays put."""
    bad = _slot(1.0)
    bad["obs"] = torch.zeros(4, 4)
    with pytest.raises(RingLayoutError, match="obs"):
        ring.push(bad)
    del bad["obs"]
    with pytest.raises(RingLayoutError):
        ring.push(bad)
    assert ring.write_count == 0


@pytest.mark.parametrize(
    "value",
    [
        torch.tensor([2.7, -1.0, 300.0, float("nan")]),  # a float into a uint8 field: 2, 255, 44, 0
        torch.zeros(4, dtype=torch.complex64),  # a complex into a byte field
        [1, 0, 1, 0],  # not a tensor
        np.zeros(4, dtype=np.uint8),  # not a tensor either
    ],
    ids=["float", "complex", "list", "numpy"],
)
def test_a_value_that_would_not_keep_its_kind_is_refused(ring: HostRing, value: object) -> None:
    """A non-tensor field, or one of a higher dtype kind than the field's, raises and publishes nothing."""
    bad: dict[str, object] = {**_slot(1.0), "flag": value}
    with pytest.raises(RingLayoutError, match=r"'flag': '(float32|complex64|list|ndarray)"):
        ring.push(bad)  # type: ignore[arg-type]
    assert ring.write_count == 0


def test_commit_more_than_available_raises(ring: HostRing) -> None:
    """commit_reads refuses to move past the write cursor."""
    ring.push(_slot(1.0))
    with pytest.raises(RingLayoutError, match="commit_reads"):
        ring.commit_reads(2)


def test_attach_shares_memory_and_checks_header(ring: HostRing) -> None:
    """An attached ring sees the creator's slots; a handle with another layout is refused."""
    handle = pickle.loads(pickle.dumps(ring.handle))
    other = HostRing.attach(handle)
    ring.push(_slot(7.0))
    count, views = other.read_span(4)
    assert count == 1 and float(views["obs"][0, 0, 0]) == 7.0
    other.commit_reads(1)
    assert ring.read_count == 1
    other.close()
    wrong = type(handle)(handle.name, _layout(4, act=3), handle.capacity, False)
    with pytest.raises(SegmentError, match="layout fingerprint"):
        HostRing.attach(wrong)


def test_ring_itself_is_not_picklable(ring: HostRing) -> None:
    """Pickling the ring (rather than its handle) raises, so contents never travel by pickle."""
    with pytest.raises(TypeError, match="handle"):
        pickle.dumps(ring)


def test_attach_after_unlink_and_use_after_close() -> None:
    """Attaching an unlinked segment and using a closed ring raise SegmentError; views outlive close."""
    ring = HostRing.create(LAYOUT, capacity=2)
    handle = ring.handle
    ring.push(_slot(3.0))
    _, views = ring.read_span(1)
    ring.close()
    ring.close()
    ring.unlink()
    assert float(views["obs"][0, 0, 0]) == 3.0  # the mapping lives while a view does
    with pytest.raises(SegmentError):
        ring.push(_slot(1.0))
    with pytest.raises(SegmentError, match="does not exist"):
        HostRing.attach(handle)


def test_context_manager_unlinks_for_creator() -> None:
    """Leaving the creator's with-block closes and unlinks the segment."""
    with HostRing.create(LAYOUT, capacity=2) as ring:
        path = seg.SHM_DIR / ring.name
        assert path.exists()
    assert not path.exists()


def test_invalid_capacity() -> None:
    """A capacity < 1 is refused with the config name in the message."""
    with pytest.raises(RingLayoutError, match="ring_capacity"):
        HostRing.create(LAYOUT, capacity=0)


def test_debug_mode_catches_unwritten_slot() -> None:
    """In debug mode a slot published without being written raises UnwrittenSlotError on read."""
    layout = RingLayout.of(2, {"x": ((3,), torch.float32), "n": ((), torch.int32), "f": ((), torch.bool)})
    with HostRing.create(layout, capacity=3, debug=True) as ring:
        flag = torch.zeros(2, dtype=torch.bool)
        ring.push({"x": torch.zeros(2, 3), "n": torch.zeros(2, dtype=torch.int32), "f": flag})
        count, views = ring.read_span(3)
        assert count == 1
        ring.commit_reads(1)
        assert torch.isnan(views["x"]).all()  # committed slots are refilled with sentinels
        ring._segment.words[seg.COUNTER_A] += 1  # simulate a producer bug: publish an unwritten slot
        with pytest.raises(UnwrittenSlotError, match="cursor 1"):
            ring.read_span(3)


def test_other_architectures_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off x86-64 the ring refuses to start (Note [Ring memory ordering])."""
    import platform

    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    with pytest.raises(UnsupportedPlatformError, match="aarch64"):
        HostRing.create(LAYOUT, capacity=2)


def test_a_wait_yields_64_times_then_sleeps_20_us_doubling_to_1_ms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backoff: 64 yields, then sleeps of 20 µs, 40 µs, ... capped at 1 ms (the documented schedule)."""
    from shm_transport import _waiting

    yields: list[None] = []
    sleeps: list[float] = []
    monkeypatch.setattr(_waiting.os, "sched_yield", lambda: yields.append(None))
    monkeypatch.setattr(_waiting.time, "sleep", sleeps.append)
    backoff = _waiting.Backoff(timeout_s=3600.0)
    for _ in range(64 + 8):
        assert backoff.wait()
    assert len(yields) == 64
    assert sleeps == pytest.approx([20e-6, 40e-6, 80e-6, 160e-6, 320e-6, 640e-6, 1e-3, 1e-3])
