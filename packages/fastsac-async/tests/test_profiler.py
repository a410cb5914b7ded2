"""The learner's profiling window: the busy share of its kernels, and the device table on CUDA."""

import logging
import re
import time
from types import SimpleNamespace

import pytest
import torch

from fastsac_async.learner.profiler import busy_fraction, profiled


def test_busy_fraction_counts_overlaps_once_and_clips_to_the_window() -> None:
    """Overlapping intervals count once; parts outside the window and an empty window count nothing."""
    assert busy_fraction([], 0.0, 10.0) == 0.0
    assert busy_fraction([(1.0, 3.0), (2.0, 4.0), (6.0, 7.0)], 0.0, 10.0) == pytest.approx(0.4)
    assert busy_fraction([(-5.0, 2.0), (9.0, 20.0)], 0.0, 10.0) == pytest.approx(0.3)
    assert busy_fraction([(4.0, 5.0), (1.0, 2.0)], 0.0, 10.0) == pytest.approx(0.2)
    assert busy_fraction([(1.0, 2.0)], 5.0, 5.0) == 0.0


@pytest.mark.gpu
def test_a_cuda_window_logs_the_device_table_and_a_busy_share(caplog: pytest.LogCaptureFixture) -> None:
    """Half the window in a kernel, half the host asleep with the GPU idle: a busy share near 50 %."""
    device = torch.device("cuda", 0)
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()

    class Stand:
        updates = 0
        agent = SimpleNamespace(device=device)

        def run_iteration(self) -> bool:
            torch.cuda._sleep(40_000_000)  # about 20 ms of GPU time
            torch.cuda.synchronize()
            time.sleep(0.02)  # the GPU idles
            self.updates += 1
            return True

    with caplog.at_level(logging.INFO):
        assert profiled(Stand(), 6, "learner0")  # type: ignore[arg-type]
    text = "\n".join(r.getMessage() for r in caplog.records)
    match = re.search(r"kernels and copies ran in ([\d.]+) % of the window", text)
    assert match and re.search(r"Self (CUDA|Device)", text), text
    assert 20.0 < float(match.group(1)) < 80.0, match.group(0)
