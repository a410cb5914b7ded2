"""Metric loggers: ``logger=`` lists, and W&B in offline mode recording what TensorBoard records."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fastsac_async.run_layout import RunLayout
from fastsac_trainer.config.exceptions import TrainerAppError
from fastsac_trainer.loggers import WandbReporter, quote_logger_list
from fastsac_trainer.reporting import EvalPoint, Snapshot
from fastsac_trainer.run_dir import latest_checkpoint
from fastsac_trainer.tensorboard import ITERATION, logged_scalars

APP_DIR = Path(__file__).resolve().parents[1]


def _snapshot(iteration: int) -> Snapshot:
    return Snapshot(
        iteration=iteration,
        env_steps=iteration * 8,
        total_env_steps=80,
        elapsed_s=float(iteration),
        scalars={"rollout/mean_return": 2.0 * iteration, "train/qf_loss": 1.0 / iteration, "x/nan": math.nan},
        timing={"collector0": {"env_step": 3.0}},
    )


def test_a_comma_list_of_loggers_is_one_value() -> None:
    """``logger=tensorboard,wandb`` reaches hydra quoted (not as a sweep); other overrides are untouched."""
    assert quote_logger_list(["logger=tensorboard,wandb", "seed=1,2", "logger=wandb"]) == [
        "logger='tensorboard,wandb'",
        "seed=1,2",
        "logger=wandb",
    ]


def test_an_unknown_logger_is_refused_in_one_line() -> None:
    """``logger=mlflow`` names the setting and the choices."""
    from omegaconf import OmegaConf

    from fastsac_trainer.config.compose import compose_config
    from fastsac_trainer.config.validate import validate_config

    cfg = OmegaConf.to_container(compose_config(["task=pendulum", "logger='tensorboard,mlflow'"]))
    with pytest.raises(
        TrainerAppError, match=r"logger='tensorboard,mlflow' is invalid: use tensorboard, wandb"
    ):
        validate_config(cfg, cuda_count=0)  # type: ignore[arg-type]


@pytest.fixture
def wandb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The wandb module in offline, silent mode; its global state torn down after the test."""
    module = pytest.importorskip("wandb", reason="the optional extra `wandb` is not installed")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield module
    module.teardown()


def _wandb_launches(run_dir: Path) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each launch's run record and history rows as wandb's own reader prints them, in start order.

    The reader is wandb-core's ``leet inspect``, run as ``python -m wandb leet inspect --json FOLDER``
    runs it, without that command's Python start (1.5 s of CPU a call; the kill test polls with it).
    """
    from wandb.util import get_core_path

    launches = []
    for folder in RunLayout(run_dir).wandb_files.glob("offline-run-*"):
        (log,) = folder.glob("run-*.wandb")
        command = [get_core_path(), "leet", "inspect", "--no-observability", "--json"]
        command += ["--run-file", str(log), str(folder.parent)]
        read = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
        records = [json.loads(line) for line in read.stdout.splitlines()]
        run = next(r["run"] for r in records if r["type"] == "run")
        launches.append((run, [r["history"]["item"] for r in records if r["type"] == "history"]))
    return sorted(launches, key=lambda launch: str(launch[0]["start_time"]))


def _launch(
    wandb: Any, reporter: WandbReporter, iterations: tuple[int, ...], late: EvalPoint | None = None
) -> None:
    """One launch: a snapshot per iteration, then ``late`` (an evaluation after the last); then teardown."""
    try:
        for iteration in iterations:
            reporter.report(_snapshot(iteration))
        if late is not None:
            reporter.evaluated(late)
        reporter.close()
    finally:
        wandb.teardown()  # the next launch (or the reader) sees a finished run


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if not k.startswith("_")}


@pytest.mark.slow
def test_wandb_offline_run_holds_every_tensorboard_scalar(tmp_path: Path, wandb: Any) -> None:
    """Offline, the W&B run files hold the config, the group and every logged scalar at its env steps."""
    config = {"seed": 3, "task": {"name": "pendulum"}, "wandb": {"project": "p", "entity": None}}
    _launch(wandb, WandbReporter(tmp_path, config, "p", None, "grp"), (1, 2))
    ((run, history),) = _wandb_launches(tmp_path)
    assert [_public(row) for row in history] == [
        {**logged_scalars(_snapshot(i)), "env_steps": 8 * i} for i in (1, 2)
    ]
    assert [row["_step"] for row in history] == [1, 2], "W&B's step is the iteration"
    assert run["run_group"] == "grp" and run["project"] == "p"
    assert run["run_id"] == RunLayout(tmp_path).wandb_id.read_text().strip()
    assert run["config"]["update"]["seed"] == 3 and run["config"]["update"]["task"] == {"name": "pendulum"}


@pytest.mark.slow
def test_a_resumed_wandb_run_is_rewound_to_its_checkpoint(tmp_path: Path, wandb: Any) -> None:
    """Resuming iteration 20's checkpoint rewinds the same W&B run to step 20 and logs the resume after it."""
    config = {"seed": 3, "wandb": {"project": "p", "entity": None}}
    for resumed_at, iterations in ((None, (10, 20, 30)), (20, (25, 35))):  # killed at 30, checkpoint 20
        _launch(wandb, WandbReporter(tmp_path, config, "p", None, None, resumed_at), iterations)
    (first, first_rows), (second, second_rows) = _wandb_launches(tmp_path)
    assert first["run_id"] == second["run_id"] and "branch_point" not in first
    assert second["branch_point"] == {"run": first["run_id"], "metric": "_step", "value": 20}
    assert [(row["_step"], row["env_steps"]) for row in first_rows] == [(10, 80), (20, 160), (30, 240)]
    assert [(row["_step"], row["env_steps"]) for row in second_rows] == [(25, 200), (35, 280)]


@pytest.mark.slow
def test_after_a_refused_rewind_every_later_resume_of_the_run_is_plain(
    tmp_path: Path, wandb: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A server refusing the rewind (W&B's own error, raised for resume_from): later resumes never rewind."""
    real_init = wandb.init
    rewinds: list[str] = []

    def refusing_init(**kwargs: Any) -> Any:  # the refusal of a server without rewind (no server here)
        if "resume_from" in kwargs:
            rewinds.append(kwargs["resume_from"])
            raise wandb.errors.UsageError("rewind is not enabled for this entity")
        return real_init(**kwargs)

    monkeypatch.setattr(wandb, "init", refusing_init)
    for resumed_at, iterations in ((None, (10, 20, 30)), (20, (25, 35)), (35, (40,))):
        _launch(wandb, WandbReporter(tmp_path, {"seed": 3}, "p", None, None, resumed_at), iterations)
    run_id = RunLayout(tmp_path).wandb_id.read_text().split()[0]
    assert rewinds == [f"{run_id}?_step=20"], "only the first resume asks for a rewind"
    assert "counts its own steps since a rewind was refused" in caplog.text
    launches = _wandb_launches(tmp_path)
    assert [[row["env_steps"] for row in rows] for _, rows in launches] == [[80, 160, 240], [200, 280], [320]]
    assert not any("branch_point" in run for run, _ in launches), "no launch rewinds the run"
    later = [[row["_step"] for row in rows] for _, rows in launches[1:]]
    assert later == [[0, 1], [0]], "W&B's own count (offline, each launch's), not the iterations"


def _eval_point(iteration: int, video: Path | None) -> EvalPoint:
    return EvalPoint(
        iteration=iteration, env_steps=8 * iteration, mean_return=float(iteration), mean_length=5.0,
        best_return=float(iteration), seconds=0.5, video=video,
    )  # fmt: skip


@pytest.mark.slow
def test_wandb_logs_each_evaluation_with_its_clip_and_one_after_the_last_snapshot(
    tmp_path: Path, wandb: Any
) -> None:
    """An evaluation goes into the next snapshot's step with its clip; one after the last, a step later."""
    clip = RunLayout(tmp_path).eval_clip(1)
    clip.parent.mkdir()
    write = (
        "import sys, numpy, imageio.v3 as iio; iio.imwrite(sys.argv[1], numpy.zeros((4, 16, 16, 3), 'uint8'))"
    )
    subprocess.run([sys.executable, "-c", write, str(clip)], check=True, timeout=120)
    reporter = WandbReporter(tmp_path, {"seed": 0}, "p", None, None)
    reporter.evaluated(_eval_point(1, clip))
    _launch(wandb, reporter, (1, 2), late=_eval_point(2, None))
    ((_, history),) = _wandb_launches(tmp_path)
    evals = [(row["_step"], row.get("eval/return"), row.get("eval_env_steps")) for row in history]
    assert evals == [(1, 1.0, 8), (2, None, None), (3, 2.0, 16)]
    assert history[0]["eval/video._type"] == "video-file", history[0]
    assert not any(key.startswith("eval/video") for key in history[2])
    media = list(RunLayout(tmp_path).wandb_files.glob("offline-run-*/files/" + history[0]["eval/video.path"]))
    assert len(media) == 1 and media[0].read_bytes() == clip.read_bytes(), "the clip itself is in the run"


def _last_event_step(run_dir: Path) -> int:
    """The env steps of the run's last TensorBoard point (-1 before the first)."""
    if not run_dir.is_dir():
        return -1
    events = EventAccumulator(str(run_dir))
    events.Reload()
    # A point's scalars are written one by one: the file may already hold others, not yet this one.
    return (
        max((e.step for e in events.Scalars(ITERATION)), default=-1)
        if ITERATION in events.Tags()["scalars"]
        else -1
    )


def _checkpoint_iteration(run_dir: Path) -> int:
    """The iteration of the run's latest checkpoint (0 before the first)."""
    checkpoint = latest_checkpoint(run_dir)
    return 0 if checkpoint is None else int(checkpoint.stem.rpartition("_")[2])


@pytest.mark.slow
@pytest.mark.usefixtures("child_tmpdir")  # the killed run's temporary files (wandb's too) go with the test
def test_a_killed_run_resumed_from_its_checkpoint_keeps_every_later_point_in_wandb(tmp_path: Path) -> None:
    """SIGKILLed past its last checkpoint, then resumed: W&B rewinds there and holds every later point."""
    pytest.importorskip("wandb", reason="the optional extra `wandb` is not installed")
    env = dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="offline", WANDB_SILENT="true")
    tiny = ["task=pendulum", "task.num_envs=2", "algo.trainer.asynchronous=false",
            "algo.agent.learning_starts=2", "algo.agent.batch_size=32", "algo.agent.num_updates=1",
            "algo.trainer.logging_interval=5", "algo.trainer.save_interval=300", "console=plain",
            "logger=tensorboard,wandb"]  # fmt: skip
    run_dir = tmp_path / "runs" / "k"
    endless = [
        sys.executable,
        str(APP_DIR),
        *tiny,
        "algo.trainer.num_learning_iterations=100000",
        "run_name=k",
    ]
    first = subprocess.Popen(
        endless, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 300
        while _last_event_step(run_dir) < 2 * 310:  # two reports past the checkpoint of iteration 300
            assert first.poll() is None and time.monotonic() < deadline, "the first launch ended early"
            time.sleep(0.2)
        # Then until W&B's file (written every second) holds a point past the latest checkpoint.
        while max((row["_step"] for _, rows in _wandb_launches(run_dir) for row in rows), default=0) <= (
            _checkpoint_iteration(run_dir)
        ):
            assert first.poll() is None and time.monotonic() < deadline, "W&B's file holds no later point"
            time.sleep(0.5)
    finally:
        first.kill()
        first.wait(timeout=60)
    at = _checkpoint_iteration(run_dir)
    resume = [
        sys.executable,
        str(APP_DIR),
        f"resume={run_dir}",
        f"algo.trainer.num_learning_iterations={at + 50}",
    ]
    resumed = subprocess.run(
        resume, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr

    (killed, killed_rows), (again, again_rows) = _wandb_launches(run_dir)
    assert killed["run_id"] == again["run_id"] == RunLayout(run_dir).wandb_id.read_text().strip()
    assert max(row["_step"] for row in killed_rows) > at, "the killed launch logged past its checkpoint"
    assert again["branch_point"] == {"run": killed["run_id"], "metric": "_step", "value": at}
    # Every point the resume logged, at its iteration and env steps, as TensorBoard holds it too.
    events = EventAccumulator(str(run_dir))
    events.Reload()
    tensorboard = [(int(e.value), e.step) for e in events.Scalars(ITERATION) if e.step > 2 * at]
    assert [(row["_step"], row["env_steps"]) for row in again_rows] == tensorboard
    assert tensorboard[0][0] == at + 5 and tensorboard[-1][0] == at + 50
    # W&B's history once rewound (the killed launch up to the checkpoint, then the resume) never goes back.
    shown = [row for row in killed_rows if row["_step"] <= at] + again_rows
    assert all(a["env_steps"] < b["env_steps"] for a, b in itertools.pairwise(shown))
