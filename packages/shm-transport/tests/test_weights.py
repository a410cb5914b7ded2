import pickle
import sys
from collections.abc import Iterator

import pytest
import shmtx_workers as w
import torch
from _runner import SPAWN, run_bodies

from shm_transport import (
    FieldSpec,
    HostWeightReader,
    HostWeightWriter,
    WeightChannel,
    WeightReader,
    WeightReaderHandle,
    WeightWriter,
)
from shm_transport.exceptions import RingLayoutError, SegmentError

EXTRAS = {"mean": FieldSpec((3,), torch.float32), "count": FieldSpec((), torch.int64)}


@pytest.fixture
def channel() -> Iterator[WeightChannel]:
    channel = WeightChannel.create(10, EXTRAS)
    yield channel
    channel.close()
    channel.unlink()


def _snapshot(value: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    return torch.full((10,), value), {"mean": torch.full((3,), value), "count": torch.tensor(int(value))}


def _dst() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    return torch.zeros(10), {"mean": torch.zeros(3), "count": torch.zeros((), dtype=torch.int64)}


def test_publish_then_poll_loads_latest_once(channel: WeightChannel) -> None:
    """Versions count up from 1; poll loads the newest once, then returns None; lag is tracked."""
    writer, reader = HostWeightWriter(channel), HostWeightReader(channel)
    assert isinstance(writer, WeightWriter) and isinstance(reader, WeightReader)
    params, extras = _dst()
    assert reader.poll(params, extras) is None and reader.loaded_version == 0
    assert writer.publish(*_snapshot(1.0)) == 1
    assert writer.publish(*_snapshot(2.0)) == 2
    assert reader.lag == 2 and reader.published_version() == 2
    assert reader.poll(params, extras) == 2
    assert params.eq(2.0).all() and extras["mean"].eq(2.0).all() and int(extras["count"]) == 2
    assert reader.poll(params, extras) is None and reader.lag == 0


def test_the_reader_handle_opens_a_reader_that_closes_the_channel_it_attached(channel: WeightChannel) -> None:
    """``reader_handle().open_reader()`` loads what was published; its ``close()`` closes its channel."""
    writer = HostWeightWriter(channel)
    assert writer.device == torch.device("cpu")
    handle = pickle.loads(pickle.dumps(writer.reader_handle()))
    assert isinstance(handle, WeightReaderHandle)
    reader = handle.open_reader()
    writer.publish(*_snapshot(3.0))
    params, extras = _dst()
    assert reader.poll(params, extras) == 1 and params.eq(3.0).all()
    reader.close()
    with pytest.raises(SegmentError, match="closed in this process"):
        reader.published_version()
    assert writer.publish(*_snapshot(4.0)) == 2, "the writer's own channel stays open"


def test_a_channel_without_host_slots_refuses_a_host_reader() -> None:
    """``open_reader()`` on a seq-only (CUDA-IPC) channel's handle fails with a message, attaching nothing."""
    seq_only = WeightChannel.create(10, EXTRAS, host_slots=False)
    try:
        with pytest.raises(SegmentError, match="no host slots"):
            seq_only.handle.open_reader()
    finally:
        seq_only.close()
        seq_only.unlink()


def test_write_in_progress_means_keep_current(channel: WeightChannel) -> None:
    """An odd sequence number makes poll return None at once and leaves the destinations untouched."""
    writer, reader = HostWeightWriter(channel), HostWeightReader(channel)
    writer.publish(*_snapshot(1.0))
    channel.store_seq(channel.load_seq() + 1)  # a writer stopped between "seq odd" and "seq even"
    params, extras = _dst()
    assert reader.poll(params, extras) is None
    assert params.eq(0.0).all()
    # The next writer restarts from the even number below and still moves the version forward.
    assert HostWeightWriter(channel).publish(*_snapshot(2.0)) == 2
    assert reader.poll(params, extras) == 2 and params.eq(2.0).all()


def test_a_write_of_the_other_slot_does_not_discard_the_copy(channel: WeightChannel) -> None:
    """The re-check discards a copy only once the writer began the next write of the same slot (v + 2)."""
    writer, reader = HostWeightWriter(channel), HostWeightReader(channel)
    writer.publish(*_snapshot(1.0))
    seq = channel.load_seq()
    assert seq == 2 and not reader._overwritten(seq)
    channel.store_seq(seq + 1)  # version 2 in progress: slot 0, not version 1's slot 1
    assert not reader._overwritten(seq)
    channel.store_seq(seq + 2)  # version 2 complete
    assert not reader._overwritten(seq)
    channel.store_seq(seq + 3)  # version 3 in progress: slot 1, the slot being copied
    assert reader._overwritten(seq)


def test_wrong_sizes_are_refused(channel: WeightChannel) -> None:
    """Both publish and poll reject a parameter vector or extras of the wrong shape."""
    writer = HostWeightWriter(channel)
    with pytest.raises(RingLayoutError, match=r"\(10,\)"):
        writer.publish(torch.zeros(11), _snapshot(0.0)[1])
    with pytest.raises(RingLayoutError, match="extras"):
        writer.publish(torch.zeros(10), {"mean": torch.zeros(3)})


def test_a_dtype_of_another_kind_is_refused_both_ways(channel: WeightChannel) -> None:
    """Publish refuses a float source for an int64 extra; poll an integer destination for the params."""
    writer = HostWeightWriter(channel)
    with pytest.raises(RingLayoutError, match=r"sources.*count: torch.float32 against the channel's"):
        writer.publish(torch.zeros(10), {"mean": torch.zeros(3), "count": torch.tensor(1.5)})
    assert channel.load_seq() == 0  # nothing published
    writer.publish(*_snapshot(1.0))
    reader = HostWeightReader(channel)
    dst, extras = _dst()
    with pytest.raises(RingLayoutError, match=r"destinations.*flat params: torch.int64"):
        reader.poll(torch.zeros(10, dtype=torch.int64), extras)
    assert reader.poll(dst, extras) == 1  # the float64 of a wider kind is fine: a cast up
    assert reader.poll(torch.zeros(10, dtype=torch.float64), extras) is None  # nothing newer, no error


def test_a_closed_reader_says_it_is_closed(channel: WeightChannel) -> None:
    """A poll on a reader whose channel was closed in this process says so, not "a channel without slots"."""
    reader = channel.handle.open_reader()
    reader.close()
    with pytest.raises(SegmentError, match="is closed in this process"):
        reader.poll(*_dst())


def test_extras_given_as_shape_and_dtype_pairs_are_refused_with_the_fix() -> None:
    """WeightChannel.create takes FieldSpecs: a (shape, dtype) pair is refused in one line naming them."""
    with pytest.raises(RingLayoutError, match=r"FieldSpec\(shape, dtype\)"):
        WeightChannel.create(10, {"m": ((3,), torch.float32)})  # type: ignore[dict-item]


def test_handle_attach_and_sequence_only_channel(channel: WeightChannel) -> None:
    """An attached channel sees published versions; a host_slots=False channel has no slots."""
    other = WeightChannel.attach(channel.handle)
    HostWeightWriter(channel).publish(*_snapshot(5.0))
    params, extras = _dst()
    assert HostWeightReader(other).poll(params, extras) == 1 and params.eq(5.0).all()
    other.close()
    seq_only = WeightChannel.create(10, EXTRAS, host_slots=False)
    try:
        with pytest.raises(SegmentError, match="host_slots=False"):
            seq_only.slot(0)
    finally:
        seq_only.close()
        seq_only.unlink()


def _stress(mode: str, loads: int) -> None:
    num_params = 1024
    channel = WeightChannel.create(num_params, w.WEIGHT_EXTRAS)
    stop = SPAWN.Event()
    reader_out: dict[str, object] = {}
    try:
        if mode == "thread":
            interval = sys.getswitchinterval()
            sys.setswitchinterval(1e-5)  # interleave the threads finely
            try:
                reader_out = run_bodies(
                    [
                        (w.weight_writer_loop, (channel.handle, num_params, stop)),
                        (w.weight_stopping_reader, (channel.handle, num_params, loads, 200.0, stop)),
                    ],
                    mode="thread",
                    timeout_s=240.0,
                )
            finally:
                sys.setswitchinterval(interval)
        else:
            reader_out = run_bodies(
                [
                    (w.weight_writer_loop, (channel.handle, num_params, stop)),
                    (w.weight_stopping_reader, (channel.handle, num_params, loads, 200.0, stop)),
                ],
                mode="process",
                timeout_s=240.0,
            )
    finally:
        stop.set()
        channel.close()
        channel.unlink()
    loaded, torn, regress, _ = reader_out["reader"]  # type: ignore[misc]
    published, wrong_version = reader_out["writer"]  # type: ignore[misc]
    assert loaded >= loads
    assert torn == 0 and regress == 0 and wrong_version == 0
    assert published >= loaded


@pytest.mark.slow
def test_reader_never_loads_a_torn_snapshot_threads() -> None:
    """Writer thread publishing flat out, reader thread polling: 100k loads, all consistent, increasing."""
    _stress("thread", loads=100_000)


@pytest.mark.slow
def test_reader_never_loads_a_torn_snapshot_processes() -> None:
    """The same across two spawned processes, 20k loads (truly parallel; slower per load on 2 cores)."""
    _stress("process", loads=20_000)
