"""Evaluation during training, end to end on CPU: real CLI runs, TensorBoard events, best.pt, resume."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fastsac_async.run_layout import RunLayout
from fastsac_core import peek_checkpoint
from fastsac_trainer.cli import main
from fastsac_trainer.evaluate import eval_main, evaluate, load_policy
from fastsac_trainer.tasks import env_factory_for
from fastsac_trainer.testing import TINY_PENDULUM

APP_DIR = Path(__file__).resolve().parents[1]
TINY = [*TINY_PENDULUM, "algo.trainer.save_interval=2"]
EVAL = ["algo.trainer.eval_interval_s=null", "algo.trainer.eval_episodes=2", "runs_root=runs", "run_name=r"]
SYNC = [*TINY, *EVAL[:3], "algo.trainer.asynchronous=false"]


def _eval_steps(run_dir: Path) -> list[int]:
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    assert "eval/episode_length" in events.Tags()["scalars"]
    return [int(e.step) for e in events.Scalars("eval/return")]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [sys.executable, str(APP_DIR), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def _trainer(args: list[str], cwd: Path) -> str:
    result = _run(args, cwd)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def sync_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two sync runs of 60 iterations, one seed, in ``runs/``: ``r`` evaluates every 20, ``off`` never.

    Tests that change a run work on their own copy of it.
    """
    folder = tmp_path_factory.mktemp("sync")
    _trainer(
        [*SYNC, "algo.trainer.eval_interval=20", "algo.trainer.num_learning_iterations=60", "run_name=r"],
        folder,
    )
    off = ["algo.trainer.eval_interval=null", "algo.trainer.num_learning_iterations=60", "run_name=off"]
    _trainer([*SYNC, *off], folder)
    return folder


@pytest.mark.slow
def test_async_run_logs_eval_at_the_cadence_and_best_pt_reproduces_its_return(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Async: eval/return every >= eval_interval iterations; `trainer eval` of best.pt gives its return."""
    budget = ["algo.trainer.num_learning_iterations=300", "algo.trainer.save_interval=1000"]
    one_collector = "algo.trainer.async_options.num_collectors=1"
    _trainer([*TINY, *EVAL, *budget, "algo.trainer.eval_interval=50", one_collector], tmp_path)
    run_dir = tmp_path / "runs" / "r"
    steps = _eval_steps(run_dir)
    assert len(steps) >= 2, steps
    assert all(b - a >= 50 * 2 for a, b in itertools.pairwise(steps)), f"cadence: {steps}"
    finished = re.findall(r"EvalReport\(global_step=(\d+),", RunLayout(run_dir).log("evaluator").read_text())
    assert steps == [2 * int(g) for g in finished], "every finished evaluation is logged, the last included"
    best = RunLayout(run_dir).best_checkpoint
    extra = peek_checkpoint(best)["extra"]
    assert extra["iteration"] * 2 in steps, "best.pt holds weights that were evaluated and logged"
    policy, _ = load_policy(best)
    config = OmegaConf.to_container(OmegaConf.load(RunLayout(run_dir).config), resolve=True)
    task = config["task"]  # type: ignore[index]
    assert evaluate(policy, env_factory_for(task), 2, 0).mean_return == extra["eval_return"], "exactly"
    capsys.readouterr()
    assert eval_main([f"checkpoint={best}", "episodes=2"]) == 0  # `trainer eval`, in this process
    printed = capsys.readouterr().out
    assert f"mean return {extra['eval_return']:.2f}" in printed, printed


@pytest.mark.slow
def test_sync_run_evaluates_every_eval_interval_and_a_resume_keeps_the_better_best(
    sync_runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sync: eval/return exactly every eval_interval iterations; a resume never replaces a better best.pt."""
    sync = [*SYNC, "run_name=r", "algo.trainer.eval_interval=20"]
    run_dir = tmp_path / "runs" / "r"
    shutil.copytree(sync_runs / "runs" / "r", run_dir)  # the shared run stays as it ended
    assert _eval_steps(run_dir) == [40, 80, 120], "every 20 iterations of 2 envs"
    best = RunLayout(run_dir).best_checkpoint
    payload = torch.load(best, weights_only=True)
    payload["extra"]["eval_return"] = 1e9  # a best no later evaluation can beat
    torch.save(payload, best)
    saved = best.read_bytes()
    _trainer([*sync, "algo.trainer.num_learning_iterations=100", "resume=runs/r"], tmp_path)
    assert _eval_steps(run_dir)[-2:] == [160, 200], "the resumed run goes on evaluating"
    assert best.read_bytes() == saved, "the better best of the first session is kept"
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:  # the command line's main, in this process
        main([*sync, f"resume={best}", "run_name=r2"])
    stderr = capsys.readouterr().err
    assert refused.value.code == 2 and "is a policy checkpoint" in stderr, stderr
    assert not (tmp_path / "runs" / "r2").exists()


@pytest.mark.slow
def test_evaluating_leaves_the_synchronous_training_unchanged(sync_runs: Path) -> None:
    """Same seed, evaluation every 20 iterations or none: the trained actors are identical, bit for bit."""
    runs = sync_runs / "runs"
    assert _eval_steps(runs / "r") == [40, 80, 120]
    assert not RunLayout(runs / "off").best_checkpoint.exists(), "the other run never evaluated"
    actors = [load_policy(RunLayout(runs / r).checkpoint(60))[0].actor for r in ("r", "off")]
    for (name, a), b in zip(actors[0].state_dict().items(), actors[1].state_dict().values(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algo.trainer.eval_episodes=0", "algo.trainer.eval_episodes=0 is invalid: use at least 1"),
        (
            "algo.trainer.eval_interval_s=0",
            "algo.trainer.eval_interval_s=0.0 is invalid: use a positive number",
        ),
    ],
)
def test_a_bad_eval_setting_is_refused_in_one_line(
    tmp_path: Path,
    override: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bad eval setting stops the command before anything starts: exit 2, one line with setting and fix."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as refused:  # the command line's main, in this process
        main([*TINY, "algo.trainer.num_learning_iterations=2", "runs_root=runs", override])
    lines = capsys.readouterr().err.strip().splitlines()
    assert refused.value.code == 2 and len(lines) == 1 and re.search(re.escape(message), lines[0]), lines
    assert not (tmp_path / "runs").exists()
