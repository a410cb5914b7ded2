"""Faults: a worker killed by SIGKILL or raising mid-run stops the run, bounded, named, clean."""

import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fastsac_async import AsyncOptions, EngineSpec, EngineStats, TrainingRun, WorkerFailed, run_engine
from fastsac_async.run_layout import RunLayout
from fastsac_async.testing import FailingEnvFactory, FakeEnvFactory, LearnerFaultEnvFactory, cpu_topology
from fastsac_core import FastSACConfig

CFG = FastSACConfig(
    actor_hidden_dim=16, critic_hidden_dim=16, num_atoms=11, batch_size=16, buffer_size=64,
    num_updates=1, learning_starts=3, compile=False, cudagraphs=False, amp=False,
)  # fmt: skip


def _spec(tmp_path: Path, factory: object) -> EngineSpec:
    run = TrainingRun(
        env_factory=factory, dims=FakeEnvFactory()(1, 0).dims,  # type: ignore[arg-type]
        seed=0, num_iterations=1_000_000, logging_interval=2, save_interval=0, run_dir=tmp_path,
    )  # fmt: skip
    return EngineSpec(
        run=run, topology=cpu_topology(num_envs=8, num_collectors=2, num_learners=1, batch_size=16),
        agent=CFG, options=AsyncOptions(num_collectors=2, ring_capacity=4, boot_timeout_s=120.0),
        shutdown_timeout_s=5.0,
    )  # fmt: skip


def _pid(tmp_path: Path, worker: str) -> int:
    text = RunLayout(tmp_path).log(worker).read_text()
    match = re.search(r"started \(pid (\d+)", text)
    assert match, text
    return int(match.group(1))


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["collector1", "learner0"])
def test_sigkill_mid_run_stops_everything(tmp_path: Path, victim: str, run_end: Any) -> None:
    """SIGKILL mid-run: the parent stops within a bound, names the worker and signal, leaves nothing."""
    killed_at: list[float] = []

    def on_stats(stats: EngineStats) -> None:
        if not killed_at and stats.updates > 0:
            os.kill(_pid(tmp_path, victim), signal.SIGKILL)
            killed_at.append(time.monotonic())

    with pytest.raises(WorkerFailed) as info:
        run_engine(_spec(tmp_path, FakeEnvFactory(step_delay_s=0.002)), on_stats)
    stopped_at = time.monotonic()
    assert killed_at, "the run got to updates before the kill"
    failure = info.value
    message = str(failure)
    run_end.check(
        processes=run_end.worker_pids(tmp_path).values(), creators={os.getpid()},
        exit_code=failure.exitcode, expected_exit=-signal.SIGKILL, worker=victim, message=message,
        fault_at=killed_at[0], stopped_at=stopped_at, bound_s=30.0,
    )  # fmt: skip
    assert failure.worker == victim and "killed by signal 9" in message
    assert str(RunLayout(tmp_path).error_log(victim)) in message


@pytest.mark.slow
def test_raising_worker_leaves_its_traceback(tmp_path: Path, run_end: Any) -> None:
    """A collector's env raises: WorkerFailed names both and file:line; its error log keeps the traceback."""
    with pytest.raises(WorkerFailed) as info:
        run_engine(_spec(tmp_path, FailingEnvFactory(fail_at_step=12)))
    stopped_at = time.monotonic()
    failure = info.value
    # The fault is when the worker wrote its traceback.
    fault_at = stopped_at - (time.time() - failure.error_log.stat().st_mtime)
    run_end.check(
        processes=run_end.worker_pids(tmp_path).values(), creators={os.getpid()},
        exit_code=failure.exitcode, expected_exit=1, worker=failure.worker, message=str(failure),
        fault_at=fault_at, stopped_at=stopped_at, bound_s=30.0,
    )  # fmt: skip
    assert failure.worker.startswith("collector")
    said = (
        r"_FailingEnv's step\(\) raised RuntimeError: env exploded at step 12 "
        r"\(raised at testing\.py:\d+ in step\)"
    )
    assert failure.error is not None and re.fullmatch(said, failure.error), failure.error
    assert str(failure).startswith(f"worker {failure.worker} failed: {failure.error} (exited with code 1); ")
    text = failure.error_log.read_text()
    assert "Traceback" in text and "RuntimeError: env exploded at step 12" in text, "the env's, as the cause"


@pytest.mark.slow
def test_the_failing_learner_is_named_not_the_peer_its_failure_broke(tmp_path: Path, run_end: Any) -> None:
    """Learner 1 raises mid-run, then unwinds slowly: it is named within 10 s of its failure, nothing left.

    Its teardown takes 2 x 10 s (one slow close per ring of its 2 collectors, as CUDA-IPC consumers
    wait for their producers), and its failure breaks learner 0's next collective, which then fails
    too: the run must name the cause, and at once, not once the cause has finished unwinding.
    """
    mark = tmp_path / "failed_at"
    factory = LearnerFaultEnvFactory(
        step_delay_s=0.002, rank=1, fail_at_update=4, slow_teardown_s=10.0, mark_file=str(mark)
    )
    spec = _spec(tmp_path, factory)
    spec = dataclasses.replace(
        spec,
        topology=cpu_topology(num_envs=8, num_collectors=4, num_learners=2, batch_size=16),
        options=dataclasses.replace(spec.options, num_collectors=4, num_learners=2),
        rendezvous_timeout_s=60.0,
    )
    with pytest.raises(WorkerFailed) as info:
        run_engine(spec)
    stopped_at = time.monotonic()
    failure = info.value
    run_end.check(
        processes=run_end.worker_pids(tmp_path).values(), creators={os.getpid()},
        # exited 1, or was still unwinding when named
        exit_code=failure.exitcode, expected_exit=(1, None), worker="learner1", message=str(failure),
        fault_at=stopped_at - (time.time() - float(mark.read_text())), stopped_at=stopped_at,
        bound_s=10.0 + spec.shutdown_timeout_s,
    )  # fmt: skip
    assert failure.worker == "learner1", str(failure)
    assert "update 4 failed (injected)" in failure.error_log.read_text(), "its traceback, even if cut short"


@pytest.mark.slow
def test_a_learner_that_fails_and_exits_leaves_no_partial_file(tmp_path: Path) -> None:
    """A learner that raises and exits (not killed) may die mid-write: its partial files are removed."""
    torn = RunLayout(tmp_path).checkpoints / ".replay_rank0.pt.x1y2.tmp"  # a writer thread's leftover
    torn.parent.mkdir(parents=True, exist_ok=True)
    torn.write_bytes(b"half a replay file")
    factory = LearnerFaultEnvFactory(step_delay_s=0.002, rank=0, fail_at_update=4, slow_teardown_s=0.0)
    with pytest.raises(WorkerFailed) as info:
        run_engine(_spec(tmp_path, factory))
    assert info.value.worker == "learner0" and info.value.exitcode == 1, str(info.value)
    assert not torn.exists()


@pytest.mark.gpu
@pytest.mark.slow
def test_a_sigkilled_parent_of_a_cuda_ipc_run_leaves_no_process_and_no_segment(
    tmp_path: Path, run_end: Any
) -> None:
    """SIGKILL the parent of a CUDA run with CUDA-IPC rings and weights: every worker dies, nothing stays."""
    import subprocess
    import sys

    app = Path(__file__).resolve().parents[1] / "apps" / "trainer"
    args = ["task=pendulum", "task.num_envs=4", "algo.trainer.device=cuda", "algo.trainer.asynchronous=true",
            "algo.trainer.async_options.num_collectors=2", "algo.trainer.async_options.transition_ipc=on",
            "algo.trainer.async_options.weight_ipc=on", "algo.trainer.async_options.weight_ipc_min_bytes=0",
            "algo.trainer.num_learning_iterations=1000000", "algo.trainer.save_interval=5",
            "algo.agent.learning_starts=2", "algo.agent.compile=false", "console=plain",
            "runs_root=runs", "run_name=k"]  # fmt: skip
    parent = subprocess.Popen([sys.executable, str(app), *args], cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    run_dir = tmp_path / "runs" / "k"
    try:
        deadline = time.monotonic() + 300
        while not list(RunLayout(run_dir).checkpoints.glob("model_*.pt")):
            assert parent.poll() is None and time.monotonic() < deadline, "the run trained and saved"
            time.sleep(0.5)
        pids = run_end.worker_pids(run_dir)
        assert {"learner0", "collector0", "collector1"} <= set(pids)
        pids["parent"] = parent.pid
        os.kill(parent.pid, signal.SIGKILL)
        killed = time.monotonic()
        parent.wait(30)
        run_end.check(
            processes=pids.values(), exit_code=parent.returncode, expected_exit=-signal.SIGKILL,
            fault_at=killed, stopped_at=time.monotonic(), bound_s=30.0,
            settle_s=3.0,  # whoever cleans up after them has had its chance
        )  # fmt: skip
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(30)


_KILL_A_COLLECTOR = r"""
import os, re, signal, sys
from pathlib import Path
from fastsac_async import AsyncOptions, EngineSpec, RunLayout, TrainingRun, WorkerFailed, run_engine
from fastsac_async.testing import FakeEnvFactory, cpu_topology
from fastsac_core import FastSACConfig

run_dir = Path(sys.argv[1])
agent = FastSACConfig(actor_hidden_dim=16, critic_hidden_dim=16, num_atoms=11, batch_size=16, buffer_size=64,
                      num_updates=1, learning_starts=3, compile=False, cudagraphs=False, amp=False)
run = TrainingRun(env_factory=FakeEnvFactory(step_delay_s=0.002), dims=FakeEnvFactory()(1, 0).dims, seed=0,
                  num_iterations=1_000_000, logging_interval=2, save_interval=0, run_dir=run_dir)
spec = EngineSpec(
    run=run, topology=cpu_topology(num_envs=8, num_collectors=2, num_learners=1, batch_size=16), agent=agent,
    options=AsyncOptions(num_collectors=2, ring_capacity=4, boot_timeout_s=120.0), shutdown_timeout_s=5.0,
)
killed = []

def on_stats(stats):
    if not killed and stats.updates > 0:
        log = RunLayout(run_dir).log("collector1").read_text()
        killed.append(int(re.search(r"started \(pid (\d+)", log).group(1)))
        os.kill(killed[0], signal.SIGKILL)

try:
    run_engine(spec, on_stats)
except WorkerFailed as failure:
    print(failure, flush=True)
"""


@pytest.mark.slow
def test_a_sigkilled_collector_leaves_no_semaphore_for_the_resource_tracker(tmp_path: Path) -> None:
    """SIGKILL of a collector mid-run: the parent releases every semaphore (no resource_tracker warning)."""
    result = subprocess.run(
        [sys.executable, "-c", _KILL_A_COLLECTOR, str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "worker collector1 was killed by signal 9" in result.stdout, result.stdout + result.stderr
    assert "resource_tracker" not in result.stderr and "leaked" not in result.stderr, result.stderr
    for log in RunLayout(tmp_path).logs.glob("*.log"):
        for pid in re.findall(r"started \(pid (\d+)", log.read_text()):
            assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
