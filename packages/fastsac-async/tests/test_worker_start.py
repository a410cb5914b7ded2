"""A process's start time, as every start-up line counts from it (``process_start_time``)."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil  # type: ignore[import-untyped]

from fastsac_async import process_start_time


def test_a_process_start_time_lies_between_the_calls_that_bracket_its_start() -> None:
    """A child started between t0 and t1 started in [t0, t1], to the kernel's 10 ms tick (psutil: 1 s)."""
    before = time.time()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    after = time.time()
    try:
        started = process_start_time(child.pid)
        assert before - 0.03 <= started <= after + 0.03, (before, started, after)  # two 10 ms ticks
        # psutil's boot time is whole seconds: its start times are as early as ours or up to 1 s earlier.
        assert -0.02 <= started - psutil.Process(child.pid).create_time() < 1.02
        assert process_start_time() < before, "this process started before its child"
    finally:
        child.kill()
        child.wait(timeout=30)
