"""Faults: a worker killed by SIGKILL or raising mid-run stops the run, bounded, named, clean."""

import os
import re
import signal
import time
from pathlib import Path

import pytest

from fastsac_async import AsyncOptions, EngineSpec, EngineStats, WorkerFailed, run_engine
from fastsac_async.testing import FailingEnvFactory, FakeEnvFactory, cpu_topology
from fastsac_core import FastSACConfig
from shm_transport import list_segments

CFG = FastSACConfig(
    actor_hidden_dim=16, critic_hidden_dim=16, num_atoms=11, batch_size=16, buffer_size=64,
    num_updates=1, learning_starts=3, compile=False, cudagraphs=False, amp=False,
)  # fmt: skip


def _spec(tmp_path: Path, factory: object) -> EngineSpec:
    return EngineSpec(
        topology=cpu_topology(num_envs=8, num_collectors=2, num_learners=1, batch_size=16),
        env_factory=factory, dims=FakeEnvFactory()(1, 0).dims, agent=CFG,  # type: ignore[arg-type]
        options=AsyncOptions(num_collectors=2, ring_capacity=4, boot_timeout_s=120.0),
        seed=0, num_iterations=1_000_000, logging_interval=2, save_interval=0, run_dir=tmp_path,
        shutdown_timeout_s=5.0,
    )  # fmt: skip


def _pid(tmp_path: Path, worker: str) -> int:
    text = (tmp_path / "logs" / f"{worker}.log").read_text()
    match = re.search(r"started \(pid (\d+)", text)
    assert match, text
    return int(match.group(1))


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["collector1", "learner0"])
def test_sigkill_mid_run_stops_everything(tmp_path: Path, victim: str) -> None:
    """SIGKILL mid-run: the parent stops within a bound, names the worker and signal, leaves nothing."""
    killed_at: list[float] = []

    def on_stats(stats: EngineStats) -> None:
        if not killed_at and stats.updates > 0:
            os.kill(_pid(tmp_path, victim), signal.SIGKILL)
            killed_at.append(time.monotonic())

    with pytest.raises(WorkerFailed) as info:
        run_engine(_spec(tmp_path, FakeEnvFactory(step_delay_s=0.002)), on_stats)
    assert killed_at, "the run got to updates before the kill"
    assert time.monotonic() - killed_at[0] < 30.0
    failure = info.value
    assert failure.worker == victim and failure.exitcode == -signal.SIGKILL
    message = str(failure)
    assert victim in message and "killed by signal 9" in message
    assert str(tmp_path / "async_errors" / f"{victim}_error.log") in message
    assert not [s for s in list_segments() if s.creator_pid == os.getpid()]


@pytest.mark.slow
def test_raising_worker_leaves_its_traceback(tmp_path: Path) -> None:
    """A collector whose env raises: WorkerFailed names it; its error log holds the traceback."""
    with pytest.raises(WorkerFailed) as info:
        run_engine(_spec(tmp_path, FailingEnvFactory(fail_at_step=12)))
    failure = info.value
    assert failure.worker.startswith("collector") and failure.exitcode == 1
    text = failure.error_log.read_text()
    assert "Traceback" in text and "env exploded at step 12" in text
    assert not [s for s in list_segments() if s.creator_pid == os.getpid()]
