"""DeferredPublisher: snapshots reach the writers whole, in order, and never hold back later GPU work."""

from collections.abc import Iterator

import pytest
import torch

from fastsac_async.learner.publisher import DeferredPublisher
from shm_transport import HostWeightReader, HostWeightWriter, WeightChannel
from shm_transport._layout import FieldSpec

N = 1 << 12
EXTRAS = {"mean": FieldSpec((3,), torch.float32)}


@pytest.fixture
def channel() -> Iterator[WeightChannel]:
    ch = WeightChannel.create(N, EXTRAS)
    yield ch
    ch.close()
    ch.unlink()


def _load(channel: WeightChannel) -> tuple[int | None, torch.Tensor, torch.Tensor]:
    params, mean = torch.zeros(N), torch.zeros(3)
    version = HostWeightReader(channel).poll(params, {"mean": mean})
    return version, params, mean


def test_on_cpu_begin_publishes_at_once(channel: WeightChannel) -> None:
    """Without a GPU queue there is nothing to defer: begin hands the snapshot over immediately."""
    publisher = DeferredPublisher([HostWeightWriter(channel)], torch.device("cpu"))
    for value in (1.0, 2.0):
        publisher.begin(torch.full((N,), value), {"mean": torch.full((3,), value)})
        assert not publisher.pending and publisher.version == int(value)
    assert not publisher.finish(block=False)
    version, params, mean = _load(channel)
    assert version == 2 and bool((params == 2.0).all()) and bool((mean == 2.0).all())


@pytest.fixture
def channels() -> Iterator[list[WeightChannel]]:
    chs = [WeightChannel.create(N, EXTRAS) for _ in range(3)]
    yield chs
    for ch in chs:
        ch.close()
        ch.unlink()


@pytest.mark.gpu
def test_on_cuda_finish_waits_for_the_snapshot_not_for_later_work(channels: list[WeightChannel]) -> None:
    """A snapshot behind a kernel stays pending, reaches every writer whole, never waits for later work."""
    publisher = DeferredPublisher([HostWeightWriter(ch) for ch in channels], torch.device("cuda", 0))
    flat = torch.zeros(N, device="cuda")
    publisher.begin(flat, {"mean": torch.zeros(3, device="cuda")})  # untimed: allocates the pinned copy
    publisher.finish(block=True)
    for value in (7.0, 8.0):  # later publishes reuse the publisher's pinned host copy
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time before the snapshot is written
        flat.fill_(value)
        publisher.begin(flat, {"mean": torch.full((3,), value, device="cuda")})
        assert publisher.pending and not publisher.finish(block=False)
        torch.cuda._sleep(2_000_000_000)  # ~1 s of later work on the same stream
        later = torch.cuda.Event()
        later.record()
        assert publisher.finish(block=True) and publisher.version == int(value) - 5
        assert not later.query(), "finish waited for work queued after the snapshot"
        for ch in channels:
            version, params, mean = _load(ch)
            assert version == int(value) - 5 and bool((params == value).all()) and bool((mean == value).all())
        torch.cuda.synchronize()
