"""A CUDA-IPC run leaves none of the CUDA driver's event files in /dev/shm (Note [CUDA event files])."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fastsac_async.parent.janitor import cuda_event_file_pid

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

APP_DIR = Path(__file__).resolve().parents[1]
SHM = Path("/dev/shm")
RUN = [
    "task=pendulum", "task.num_envs=4", "algo.trainer.num_learning_iterations=40",
    "algo.agent.learning_starts=2", "algo.agent.batch_size=32", "algo.agent.num_updates=2",
    "algo.trainer.device=cuda", "algo.trainer.asynchronous=true",
    "algo.trainer.async_options.num_collectors=2",
    "algo.trainer.async_options.transition_ipc=on", "algo.trainer.async_options.weight_ipc=on",
    "algo.trainer.async_options.weight_ipc_min_bytes=0", "algo.trainer.eval_interval=10",
    "algo.trainer.eval_interval_s=null", "algo.trainer.eval_episodes=1", "console=plain", "runs_root=runs",
]  # fmt: skip


def _event_files() -> dict[str, int | None]:
    """The CUDA event files in /dev/shm now: name -> the exporting pid in it."""
    return {path.name: cuda_event_file_pid(path.name) for path in SHM.glob("cuda.shm.*")}


def test_a_cuda_ipc_run_removes_the_event_files_its_workers_made(tmp_path: Path) -> None:
    """The files a CUDA-IPC run's workers export events through (seen while it runs) are gone after it."""
    before = set(_event_files())
    started = time.time()
    seen: dict[str, int | None] = {}
    out_path = tmp_path / "out.txt"
    with out_path.open("w") as out:
        proc = subprocess.Popen([sys.executable, str(APP_DIR), *RUN], cwd=tmp_path, stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip
        try:
            deadline = time.monotonic() + 400
            while proc.poll() is None:
                assert time.monotonic() < deadline, "the run ends within 400 s"
                seen.update({n: p for n, p in _event_files().items() if n not in before})
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    output = out_path.read_text()
    assert proc.returncode == 0 and "Traceback" not in output, output
    workers = {int(pid) for pid in re.findall(r"spawned \w+ \(pid (\d+)[;)]", output)}
    ours = {name for name, pid in seen.items() if pid in workers}
    assert ours, f"the run's workers exported CUDA events (else this checks nothing): seen {sorted(seen)}"
    left = {
        name for name in set(_event_files()) - before
        if (SHM / name).exists() and (SHM / name).stat().st_mtime >= started - 1
    }  # fmt: skip
    assert not left & ours, f"left behind: {sorted(left & ours)}"
    assert not {n for n in left if _event_files().get(n) in workers}, "no file of a run's worker remains"
