"""DeviceSpanTimer: GPU time of queued spans, read without synchronising; a no-op off CUDA."""

import time

import pytest
import torch

from fastsac_async.learner.device_timing import DeviceSpanTimer


def test_disabled_off_cuda() -> None:
    """On CPU a span is a plain block and collect() reports no device time."""
    timer = DeviceSpanTimer(torch.device("cpu"))
    with timer.span():
        value = sum(range(1000))
    assert value == 499500 and not timer.enabled and timer.collect() == 0.0


@pytest.mark.gpu
def test_counts_device_time_of_completed_spans_only() -> None:
    """A span still running adds nothing (and collect does not wait); once done it adds its GPU time."""
    timer = DeviceSpanTimer(torch.device("cuda", 0))
    with timer.span():
        torch.cuda._sleep(400_000_000)  # ~0.2 s of GPU time, queued
    start = time.perf_counter()
    assert timer.collect() == 0.0
    assert time.perf_counter() - start < 0.05, "collect waited for the GPU"
    torch.cuda.synchronize()
    seconds = timer.collect()
    assert 0.05 < seconds < 5.0
    assert timer.collect() == 0.0
