"""``task.env_factory``: the wiki's batched env, from a folder outside the workspace, trained and evaluated.

Training runs in real subprocesses (the CLI as a user runs it) with the folder on ``PYTHONPATH``
only: the async trainer's collector processes, the sync trainer. ``trainer eval`` and ``trainer
export`` of the run folder, which find the factory in the run's ``config.yaml``, and the refusals,
which stop before anything starts, run the command line's ``main`` in this process, the folder on
``sys.path`` (a process start each would add seconds and test nothing more).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fastsac_async.run_layout import RunLayout
from fastsac_trainer.cli import main
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


@pytest.fixture
def user_modules() -> Iterator[None]:
    """Whatever user env module a test imports in this process is forgotten after it (``sys.modules``)."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.split(".")[0] in {"bad_env", "point_env", "no_such_pkg"}:
            del sys.modules[name]


def _in_process(
    args: list[str], folder: Path, capsys: pytest.CaptureFixture[str], mp: pytest.MonkeyPatch, code: int
) -> tuple[str, str]:
    """(stdout, stderr) of the command line's ``main(args)`` in ``folder``, on ``sys.path``; exit ``code``."""
    mp.chdir(folder)
    mp.syspath_prepend(str(folder))
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(args)
    out, err = capsys.readouterr()
    assert info.value.code == code, out + err
    return out, err


@pytest.mark.slow
@pytest.mark.parametrize(
    "trainer",
    [
        "algo.trainer.asynchronous=true algo.trainer.async_options.num_collectors=2",
        "algo.trainer.asynchronous=false",
    ],
)
@pytest.mark.usefixtures("user_modules")
def test_own_batched_env_trains_then_evaluates_and_exports(
    tmp_path: Path,
    point_env_dir: Path,
    trainer: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both trainers train the user's env; eval and export rebuild it from the run folder's config."""
    out = _ok(_trainer([*TINY, *trainer.split(), "run_name=r"], tmp_path, point_env_dir))
    run_dir = tmp_path / "runs" / "r"
    assert "stop_reason=completed" in out
    saved = OmegaConf.load(RunLayout(run_dir).config)
    assert saved.task.env_factory == "point_env:make" and saved.task.env_kwargs.episode_steps == 10
    assert RunLayout(run_dir).checkpoint(6).is_file()
    monkeypatch.delitem(sys.modules, "point_env", raising=False)  # eval imports it, named in config.yaml
    monkeypatch.syspath_prepend(str(point_env_dir))
    evaluated, err = _in_process(
        ["eval", f"checkpoint={run_dir}", "episodes=3"], tmp_path, capsys, monkeypatch, 0
    )
    assert "Traceback" not in err, err
    assert evaluated.startswith("point_env:make ") and "over 3 episodes, mean length 10.0" in evaluated
    exported, err = _in_process(["export", f"checkpoint={run_dir}"], tmp_path, capsys, monkeypatch, 0)
    assert "Traceback" not in err, err
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
@pytest.mark.usefixtures("user_modules")
def test_a_bad_factory_is_refused_in_one_line(
    tmp_path: Path,
    override: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A factory that does not import or returns no batched env stops the command in one line, exit 2."""
    (tmp_path / "bad_env.py").write_text(BAD, encoding="utf-8")
    args = ["--cfg", "job", "task=gym", override, "algo.trainer.device=cpu"]
    _, err = _in_process(args, tmp_path, capsys, monkeypatch, 2)
    assert message in err and err.count("\n") == 1, err


@pytest.mark.usefixtures("user_modules")
def test_clips_of_a_users_env_are_refused_in_one_line_before_training(
    tmp_path: Path, point_env_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """eval_video_every=1 with task.env_factory (not a gymnasium id) stops before anything is written."""
    monkeypatch.syspath_prepend(str(point_env_dir))
    args = [*TINY, "algo.trainer.eval_video_every=1", "runs_root=runs"]
    out, err = _in_process(args, tmp_path, capsys, monkeypatch, 2)
    expected = (
        "error: algo.trainer.eval_video_every=1 is invalid: use 0: clips are rendered of gymnasium tasks"
    )
    assert err.startswith(expected) and "point_env" not in out, out + err
    assert not (tmp_path / "runs").exists()
