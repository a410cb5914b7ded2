"""``task.env_factory``: the wiki's batched env, from a folder outside the workspace, trained and evaluated.

Real subprocesses (the CLI as a user runs it) with the folder on ``PYTHONPATH`` only: the async
trainer's collector processes, the sync trainer, then ``trainer eval`` and ``trainer export`` from
the run folder, which find the factory in the run's ``config.yaml``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fastsac_async.run_layout import RunLayout
from fastsac_trainer.testing import TINY_RUN

TINY = ["task=gym", "task.env_factory=point_env:make", "task.env_kwargs={episode_steps:10}", *TINY_RUN]


def _trainer(args: list[str], cwd: Path, user_dir: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(user_dir))
    return subprocess.run(
        [sys.executable, "-m", "fastsac_trainer", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "trainer",
    [
        "algo.trainer.asynchronous=true algo.trainer.async_options.num_collectors=2",
        "algo.trainer.asynchronous=false",
    ],
)
def test_own_batched_env_trains_then_evaluates_and_exports(
    tmp_path: Path, point_env_dir: Path, trainer: str
) -> None:
    """Both trainers train the user's env; eval and export rebuild it from the run folder's config."""
    out = _ok(_trainer([*TINY, *trainer.split(), "run_name=r"], tmp_path, point_env_dir))
    run_dir = tmp_path / "runs" / "r"
    assert "stop_reason=completed" in out
    saved = OmegaConf.load(RunLayout(run_dir).config)
    assert saved.task.env_factory == "point_env:make" and saved.task.env_kwargs.episode_steps == 10
    assert RunLayout(run_dir).checkpoint(6).is_file()
    evaluated = _ok(_trainer(["eval", f"checkpoint={run_dir}", "episodes=3"], tmp_path, point_env_dir))
    assert evaluated.startswith("point_env:make ") and "over 3 episodes, mean length 10.0" in evaluated
    exported = _ok(_trainer(["export", f"checkpoint={run_dir}"], tmp_path, point_env_dir))
    assert RunLayout(run_dir).checkpoint(6).with_suffix(".onnx").is_file(), exported


BAD = """
import numpy as np


def not_an_env(num_envs, seed):
    return np.zeros(num_envs)
"""


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("task.env_factory=bad_env:not_an_env", "it returned a ndarray without ['num_envs', 'dims'"),
        ("task.env_factory=bad_env:missing", "bad_env has no callable missing"),
        ("task.env_factory=no_such_pkg.envs:make", "No module named 'no_such_pkg'"),
        ("task.env_factory=point_env", "write it as package.module:function"),
    ],
)
def test_a_bad_factory_is_refused_in_one_line(
    tmp_path: Path, point_env_dir: Path, override: str, message: str
) -> None:
    """A factory that does not import or returns no batched env stops the command in one line, exit 2."""
    (tmp_path / "bad_env.py").write_text(BAD, encoding="utf-8")
    result = _trainer(["--cfg", "job", "task=gym", override, "algo.trainer.device=cpu"], tmp_path, tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_clips_of_a_users_env_are_refused_in_one_line_before_training(
    tmp_path: Path, point_env_dir: Path
) -> None:
    """eval_video_every=1 with task.env_factory (not a gymnasium id) stops before anything is written."""
    done = _trainer([*TINY, "algo.trainer.eval_video_every=1", "runs_root=runs"], tmp_path, point_env_dir)
    assert done.returncode == 2, done.stdout + done.stderr
    expected = (
        "error: algo.trainer.eval_video_every=1 is invalid: use 0: clips are rendered of gymnasium tasks"
    )
    assert done.stderr.startswith(expected) and "point_env" not in done.stdout, done.stderr
    assert not (tmp_path / "runs").exists()
