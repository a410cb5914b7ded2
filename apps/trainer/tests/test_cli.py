"""The CLI end to end on CPU with a tiny budget, in real subprocesses: sync run, resume, async run."""

from __future__ import annotations

import importlib.util
import os
import pstats
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fastsac_async.run_layout import RunLayout
from fastsac_core import peek_checkpoint
from fastsac_trainer.testing import TINY_PENDULUM

APP_DIR = Path(__file__).resolve().parents[1]
TRAINER_SCRIPT = Path(sys.executable).parent / "trainer"
TINY = [*TINY_PENDULUM, "algo.trainer.save_interval=2"]


def _run(command: list[str], cwd: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="error::DeprecationWarning:trainer", **variables
    )
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


@pytest.mark.slow
def test_sync_run_then_resume_continues_the_iteration_counter(tmp_path: Path) -> None:
    """A tiny sync run writes its run folder; resume=<folder> continues it; trainer.log has both launches."""
    first = _ok(
        _run(
            [
                sys.executable,
                str(APP_DIR),
                *TINY,
                "algo.trainer.asynchronous=false",
                "algo.trainer.num_learning_iterations=4",
                "runs_root=runs",
                "run_name=r",
            ],
            tmp_path,
        )
    )
    run_dir = tmp_path / "runs" / "r"
    assert "synchronous trainer: one process, 2 envs, device cpu" in first
    assert f"✓ saved checkpoint {RunLayout(Path('runs/r')).checkpoint(4)}" in first
    assert "done:" in first
    for folder in RunLayout(run_dir).folders:
        assert folder.is_dir()
    saved = OmegaConf.load(RunLayout(run_dir).config)
    assert saved.task.name == "pendulum" and saved.algo.trainer.num_learning_iterations == 4
    assert not (tmp_path / "outputs").exists() and not (tmp_path / ".hydra").exists()
    before = peek_checkpoint(RunLayout(run_dir).checkpoint(4))
    assert before["extra"]["iteration"] == 4

    # No task or sizes on the resume command line: they come from the run's saved overrides.
    second = _ok(
        _run(
            [
                str(TRAINER_SCRIPT),
                f"resume={run_dir}",
                "algo.trainer.num_learning_iterations=6",
                "console=plain",
            ],
            tmp_path,
        )
    )
    assert f"resuming from {RunLayout(run_dir).checkpoint(4)}" in second
    assert "it 6 " in second
    after = peek_checkpoint(RunLayout(run_dir).checkpoint(6))
    assert after["extra"]["iteration"] == 6
    # The update counter continues, and the restored replay buffer lets iterations 5 and 6 update at once.
    assert after["counters"]["update_idx"] == before["counters"]["update_idx"] + 2
    assert "replay buffer of 8 transitions from iteration 4," in second, second
    events = EventAccumulator(str(run_dir))
    events.Reload()
    steps = [e.step for e in events.Scalars("perf/env_steps_per_s")]
    assert steps == [2 * 2, 4 * 2, 6 * 2], "x axis: env steps (2 envs), no point doubled back"
    assert [e.value for e in events.Scalars("progress/iteration")] == [2, 4, 6]
    # The log holds what each launch printed before the log was open: placement, run folder, resume line.
    log = RunLayout(run_dir).parent_log.read_text()
    first_launch, resumed = log.split(f"launch: trainer resume={run_dir} ")
    for launch in (first_launch, resumed):
        placement = launch.index("synchronous trainer: one process, 2 envs, device cpu\nrun folder: ")
        assert placement < launch.index("[pendulum/fastsac] it "), launch
    assert f"resuming from {RunLayout(run_dir).checkpoint(4)} (iteration 4); replay buffer of 8 " in resumed


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("fastsac_trainer.async_trainer") is None,
    reason="fastsac_trainer.async_trainer (run_async) has not landed yet",
)
def test_async_run_with_two_collectors(tmp_path: Path) -> None:
    """A tiny async run with 2 collectors boots, trains, checkpoints and leaves a clean run folder."""
    out = _ok(
        _run(
            [
                sys.executable,
                str(APP_DIR),
                *TINY,
                "algo.trainer.asynchronous=true",
                "algo.trainer.async_options.num_collectors=2",
                "algo.trainer.num_learning_iterations=6",
                "algo.trainer.device=cpu",
                "runs_root=runs",
                "run_name=a",
            ],
            tmp_path,
            FASTSAC_PROFILE_BOOT="1",  # and the start-ups under cProfile, checked below
        )
    )
    run_dir = tmp_path / "runs" / "a"
    assert "collector" in out and "transitions" in out  # the topology table
    assert "done:" in out
    boot = [line for line in out.splitlines() if line.startswith("boot: ")]
    # every worker from the first line: a learner, two collectors and the evaluator (on by default)
    assert boot[0].endswith("(0/4 ready)"), "the boot count's total is every worker from the first line"
    progress = [
        line.split(" | ")[0] for line in out.splitlines() if line.startswith("[pendulum/fastsac] it ")
    ]
    assert progress[-1].startswith("[pendulum/fastsac] it 6 ")
    assert len(progress) == len(set(progress)), f"each progress line prints once: {progress}"
    last = max(RunLayout(run_dir).checkpoints.glob("model_*.pt"))
    extra = peek_checkpoint(last)["extra"]
    assert extra["iteration"] >= 6
    assert extra["env_steps"] == extra["iteration"] * 2, "the learner records its iteration's env steps"
    assert not list(RunLayout(run_dir).errors.iterdir())
    assert {p.name for p in RunLayout(run_dir).logs.iterdir()} >= {"collector0.log", "collector1.log"}
    # The run measures its own start-up, on the console and in its log.
    parent_log = RunLayout(run_dir).parent_log.read_text()
    for milestone in ("workers started", "workers running", "first update"):
        assert re.search(rf"start-up: {milestone} \d+\.\d s after launch", out), milestone
        assert f"start-up: {milestone} " in parent_log
    assert re.search(r"spawned learner0 \(pid \d+; forked in \d+\.\d\d s\)", parent_log)
    collector_log = RunLayout(run_dir).log("collector0").read_text()
    assert re.search(
        r"collector0 started \(pid \d+, 1 torch threads, \d+\.\d\d s after its fork\)", collector_log
    )
    # FASTSAC_PROFILE_BOOT: the trainer's own start, from its command to its workers' release, and each
    # worker's.
    profiles = {p.name for p in RunLayout(run_dir).logs.glob("*.boot.prof")}
    assert profiles == {"trainer.boot.prof", "learner0.boot.prof", "collector0.boot.prof",
                        "collector1.boot.prof", "evaluator.boot.prof"}  # fmt: skip
    profiled = pstats.Stats(str(RunLayout(run_dir).boot_profile("trainer")))
    functions = {name for _, _, name in profiled.stats}  # type: ignore[attr-defined]
    assert {"run_engine", "prestart_workers"} <= functions
    assert "start-up profile: " in parent_log and "incomplete" not in parent_log
    # It also holds the placement printed before it was open, and every boot line.
    assert "collector  envs  owner" in parent_log and "run folder: runs/a" in parent_log
    assert "boot: learner0 booting (0/4 ready)" in parent_log
    assert "boot: collector1 running (4/4 ready)" in parent_log


def test_help_lists_tasks_and_options() -> None:
    """--help lists every task and the key options, exits 0, and needs no hydra run."""
    from fastsac_trainer.tasks import TASKS

    result = _run([sys.executable, str(APP_DIR), "--help"], APP_DIR)
    out = _ok(result)
    for name in TASKS:
        assert f"  {name} " in out
    for key in (
        "algo.trainer.async_options.num_collectors",
        "algo.trainer.asynchronous",
        "resume=",
        "eval",
        "export",
    ):
        assert key in out


@pytest.mark.slow
def test_runs_started_at_once_with_default_names_get_their_own_folders(tmp_path: Path) -> None:
    """Two CLI runs at once with every default name of the next minutes taken: each gets a new folder."""
    from fastsac_trainer.run_dir import default_run_name

    runs = tmp_path / "runs"
    now = time.time()
    taken = {default_run_name("pendulum", now + s) for s in range(-2, 300)}
    for name in taken:
        (runs / name).mkdir(parents=True)
        RunLayout(runs / name).config.write_text("another run\n")
    command = [
        str(TRAINER_SCRIPT), *TINY, "algo.trainer.asynchronous=false",
        "algo.trainer.num_learning_iterations=4", f"runs_root={runs}",
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        outputs = [proc.communicate(timeout=240) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    folders = [Path(line.removeprefix("run folder: ")) for out, _ in outputs for line in out.splitlines()
               if line.startswith("run folder: ")]  # fmt: skip
    assert len(folders) == 2 and folders[0] != folders[1], folders
    for folder in folders:
        assert folder.name not in taken and folder.parent == runs
        assert RunLayout(folder).checkpoint(4).is_file()
        assert len(list(folder.glob("events.out.tfevents.*"))) == 1
    assert {p.name for p in runs.iterdir()} == taken | {f.name for f in folders}
    assert all(RunLayout(runs / name).config.read_text() == "another run\n" for name in taken)
    assert all(list((runs / name).iterdir()) == [RunLayout(runs / name).config] for name in taken)


def test_the_done_lines_summary_shows_floats_to_four_figures() -> None:
    """A result's float fields read 40.42 (and 12345.68), not 40.417910447761194; counts as they are."""
    from dataclasses import dataclass

    from fastsac_trainer.outcome import summary

    @dataclass
    class Result:
        iterations: int
        mean_return: float
        stop_reason: str

    assert summary(Result(6, 40.417910447761194, "completed")) == (
        "iterations=6, mean_return=40.42, stop_reason=completed"
    )
    assert "mean_return=12345.68," in summary(Result(6, 12345.678, "completed"))


def test_a_stop_signal_after_the_outcome_ends_the_process_with_the_runs_code() -> None:
    """Once the command has its code, a late SIGINT or SIGTERM ends it at once with that code, silently."""
    script = (
        "import os, signal, time\n"
        "from fastsac_trainer.cli import end_on_a_late_signal\n"
        "end_on_a_late_signal(3)\n"
        "os.kill(os.getpid(), signal.{sig})\n"
        "time.sleep(30)\n"
    )
    for sig in ("SIGINT", "SIGTERM"):
        done = subprocess.run(
            [sys.executable, "-c", script.format(sig=sig)], capture_output=True, text=True, timeout=60
        )
        assert (done.returncode, done.stderr) == (3, ""), done.stderr
