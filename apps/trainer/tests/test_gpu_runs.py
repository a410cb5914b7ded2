"""A user's CUDA paths end to end (run on the GPU machine): train, stop, resume, then eval and export.

Each run is the real CLI in a subprocess with the task's default settings on CUDA (compiled update,
CUDA graphs); eval and export then read the CUDA-trained checkpoint in a process that sees no GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fastsac_core import peek_checkpoint

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

APP_DIR = Path(__file__).resolve().parents[1]
TINY = [
    "task=pendulum",
    "task.num_envs=4",
    "algo.trainer.logging_interval=2",
    "algo.trainer.save_interval=2",
    "algo.agent.learning_starts=2",
    "algo.agent.batch_size=32",
    "algo.agent.num_updates=2",
    "algo.trainer.device=cuda",
    "console=plain",
    "runs_root=runs",
]


def _run(args: list[str], cwd: Path, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, str(APP_DIR), *args], cwd=cwd, env=dict(os.environ, **env),
        capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "Traceback" not in out, out
    return out


def _iteration(run_dir: Path) -> int:
    last = max((run_dir / "checkpoints").glob("model_*.pt"))
    return int(peek_checkpoint(last)["extra"]["iteration"])


@pytest.mark.parametrize(
    "mode",
    [
        ["algo.trainer.asynchronous=true", "algo.trainer.async_options.num_collectors=2",
         "algo.trainer.async_options.transition_ipc=on", "algo.trainer.async_options.weight_ipc=on",
         "algo.trainer.async_options.weight_ipc_min_bytes=0"],
        ["algo.trainer.asynchronous=false"],
    ],
    ids=["async_cuda_ipc", "sync"],
)  # fmt: skip
def test_a_cuda_run_resumes_and_its_checkpoint_evaluates_and_exports_without_a_gpu(
    tmp_path: Path, mode: list[str]
) -> None:
    """CUDA run to 6 iterations, resume to 10 (counter continues), then eval and ONNX export on CPU only."""
    _run([*TINY, *mode, "algo.trainer.num_learning_iterations=6", "run_name=r"], tmp_path)
    run_dir = tmp_path / "runs" / "r"
    assert _iteration(run_dir) == 6
    if "algo.trainer.asynchronous=true" in mode:
        log = (run_dir / "logs" / "learner0.log").read_text()
        assert "host transition ring instead of CUDA IPC" not in log, "the rings were CUDA-IPC rings"
    out = _run([f"resume={run_dir}", "algo.trainer.num_learning_iterations=10", "console=plain"], tmp_path)
    assert "resuming from" in out
    assert _iteration(run_dir) == 10
    no_gpu = {"CUDA_VISIBLE_DEVICES": ""}
    evaluated = _run(["eval", f"checkpoint={run_dir}", "episodes=2"], tmp_path, **no_gpu)
    assert "mean return" in evaluated, evaluated
    onnx = tmp_path / "policy.onnx"
    _run(["export", f"checkpoint={run_dir}", "format=onnx", f"out={onnx}"], tmp_path, **no_gpu)
    assert onnx.stat().st_size > 0
