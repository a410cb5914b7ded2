"""Kill and resume: SIGKILL of the whole trainer process tree mid-run, then resume= to the budget."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fastsac_async.run_layout import RunLayout
from fastsac_core import peek_checkpoint
from fastsac_trainer.run_dir import latest_checkpoint

TRAINER = Path(sys.executable).parent / "trainer"
BUDGET = 400
RUN = [
    "task=pendulum",
    "task.num_envs=2",
    "algo.trainer.device=cpu",
    f"algo.trainer.num_learning_iterations={BUDGET}",
    "algo.trainer.logging_interval=20",
    "algo.trainer.save_interval=20",
    "algo.agent.learning_starts=2",
    "algo.agent.batch_size=32",
    "algo.agent.num_updates=1",
    "console=plain",
]
MODES = {
    "async-2-collectors": ["algo.trainer.asynchronous=true", "algo.trainer.async_options.num_collectors=2"],
    "sync": ["algo.trainer.asynchronous=false"],
}

_log = logging.getLogger(__name__)


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """The trainer in a session of its own (so one killpg reaches every process it started)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")  # TMPDIR: the test's child_tmpdir
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(TRAINER), *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _first_checkpoint(run_dir: Path, proc: subprocess.Popen[bytes], timeout_s: float) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = latest_checkpoint(run_dir)
        if found is not None:
            return found
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before its first checkpoint"
        time.sleep(0.01)
    raise AssertionError(f"no checkpoint in {run_dir} within {timeout_s} s")


def _kill_tree(proc: subprocess.Popen[bytes], tree: set[int]) -> None:
    """SIGKILL the trainer's session (parent, workers) and every process in ``tree``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.usefixtures("child_tmpdir")  # a killed trainer's temporary files go with the test
@pytest.mark.parametrize("mode", list(MODES))
def test_sigkill_of_the_whole_tree_then_resume_continues_to_the_budget(
    tmp_path: Path, run_end: Any, mode: str
) -> None:
    """SIGKILL of parent and workers mid-run; resume=<run folder> continues from the latest checkpoint."""
    run_dir = tmp_path / "runs" / "k"
    proc = _start([*RUN, *MODES[mode], f"runs_root={run_dir.parent}", "run_name=k"], tmp_path / "first.log")
    tree: set[int] = set()
    try:
        _first_checkpoint(run_dir, proc, timeout_s=120)
        tree = run_end.process_tree(proc.pid)
        names = run_end.shm_names(tree)  # its own, never another process's
        workers = run_end.worker_pids(run_dir)
        assert set(workers.values()) <= tree, (workers, tree)
        fault_at = time.monotonic()
        # Parent and workers at once, as `kill -9 -<pgid>` does; the run's janitor lives in a session
        # of its own by design (it cleans up after this) and must then exit by itself.
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        stopped_at = time.monotonic()
    finally:
        if proc.poll() is None:
            _kill_tree(proc, tree)
            proc.wait(timeout=30)
    # The resource tracker died with the group: the run's semaphores were unlinked after its boot, and
    # its janitor (in the tree) removes what is left of it before it exits.
    took = run_end.check(
        processes=tree, exit_code=proc.returncode, expected_exit=-signal.SIGKILL,
        fault_at=fault_at, stopped_at=stopped_at, bound_s=10.0, names=names,
    )  # fmt: skip
    killed = latest_checkpoint(run_dir)
    assert killed is not None
    at_kill = peek_checkpoint(killed)
    assert 0 < at_kill["extra"]["iteration"] < BUDGET, "killed mid-run"

    # Only the run folder: every setting comes from the run's overrides.txt.
    second = _start([f"resume={run_dir}"], tmp_path / "resume.log")
    seen = {second.pid}
    try:
        deadline = time.monotonic() + 180
        while second.poll() is None and time.monotonic() < deadline:
            seen |= run_end.process_tree(second.pid)
            time.sleep(0.1)
    finally:
        if second.poll() is None:
            _kill_tree(second, seen)
        second.wait(timeout=30)
    out = (tmp_path / "resume.log").read_text()
    seen |= set(run_end.worker_pids(run_dir).values())
    run_end.check(processes=seen, exit_code=second.returncode, expected_exit=0, message=out)
    assert f"resuming from {killed}" in out, out
    final = peek_checkpoint(RunLayout(run_dir).checkpoint(BUDGET))
    assert final["extra"]["iteration"] == BUDGET
    assert final["counters"]["update_idx"] > at_kill["counters"]["update_idx"], "the update counter continues"
    if mode.startswith("async"):
        assert final["extra"]["collector_steps"] == [BUDGET, BUDGET]
    _log.info(
        "%s: SIGKILL of the session at iteration %d: %d processes gone in %.3f s, exit %s; resume exit %s",
        mode, at_kill["extra"]["iteration"], len(tree), took, proc.returncode, second.returncode,
    )  # fmt: skip
