"""Bad input on the command line: exit code 2, exactly one line on stderr, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fastsac_async.run_layout import RunLayout
from fastsac_trainer.cli import main

OPTS = "algo.trainer.async_options"
APP_DIR = Path(__file__).resolve().parents[1]


def _fail(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main(args)
    captured = capsys.readouterr()
    assert info.value.code == 2
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["task=pendulum", "task.num_envs=8", f"{OPTS}.num_collectors=3"],
            f"error: {OPTS}.num_collectors=3 is invalid: task.num_envs=8 is not divisible by it; "
            "choose from {1, 2, 4, 8}",
        ),
        (
            ["task=pendulum", f"{OPTS}.num_learners=2", f"{OPTS}.num_collectors=1"],
            f"error: {OPTS}.num_learners=2",
        ),
        (
            ["task=cartpole"],
            "error: task='cartpole' is invalid: unknown task; choose one of: ant, gym, halfcheetah",
        ),
        (["task=pendulum", "algo.trainer.device=cuda:99"], "error: algo.trainer.device='cuda:99' is invalid"),
        (
            ["task=pendulum", "algo.trainer.device=gpu"],
            "error: algo.trainer.device='gpu' is invalid: use auto",
        ),
        (
            ["task=pendulum", f"{OPTS}.ring_capacity=-4"],
            f"error: {OPTS}.ring_capacity=-4 is invalid: use a positive",
        ),
        (
            ["task=pendulum", f"{OPTS}.num_collectors=="],
            f"error: malformed override: '{OPTS}.num_collectors=='",
        ),
        (
            ["task=pendulum", f"{OPTS}.utd_mode=greedy"],
            f"error: {OPTS}.utd_mode='greedy' is invalid: use strict",
        ),
        (
            ["task=pendulum", "algo.trainer.stop_grace_s=0"],
            "error: algo.trainer.stop_grace_s=0.0 is invalid: use a positive number of seconds, e.g. 5",
        ),
        (
            ["task=pendulum", "algo.trainer.checkpoint_signal=USR1"],
            "error: algo.trainer.checkpoint_signal='USR1' is invalid: use SIGUSR1, SIGUSR2 or null",
        ),
        (["task=pendulum", f"{OPTS}.transition_ipc=sometimes"], f"error: {OPTS}.transition_ipc='sometimes'"),
        (
            ["task=pendulum", f"{OPTS}.num_learners=2", f"{OPTS}.learner_devices=[cpu]"],
            f"error: {OPTS}.learner_devices=['cpu'] is invalid: it has 1 entries but num_learners=2; "
            "give one device per learner",
        ),
        (["task=pendulum", "algo.trainer.save_interval=0"], "error: algo.trainer.save_interval=0 is invalid"),
        (["task=pendulum", "algo.agent.batch_size=big"], "error: algo.agent.batch_size='big' is invalid"),
        (
            ["task=pendulum", "algo.agent.num_updates=0"],
            "error: algo.agent.num_updates=0 is invalid: use at least 1 update per iteration",
        ),
        (
            ["task=pendulum", "task.num_envs=12", "algo.agent.batch_size=250"],
            "error: algo.agent.batch_size=250 is invalid: it is not divisible by the run's 12 envs "
            "(each env gives every update batch_size / 12 samples); use 240 or 252",
        ),
        (["task=pendulum", "algo.agent.no_such_key=1"], "error: algo.agent.no_such_key is not a setting"),
        (["--cfg", "hydra"], "error: --cfg 'hydra' is not supported; use `--cfg job`"),
        (["--cfg"], "error: --cfg needs a value; use `--cfg job`"),
        (["task=pendulum", "~seed"], "error: ~seed is not supported: every setting has a value; set it"),
        (["task=pendulum", "algo.agent.v_max=inf"], "error: algo.agent.v_max=inf is invalid: use a finite"),
        (
            ["task=pendulum", "algo.trainer.asynchronous=false", f"{OPTS}.num_learners=2"],
            f"error: {OPTS}.num_learners=2 is invalid: the synchronous trainer has one learner",
        ),
        (  # --cfg job checks the placement as a launch does
            ["--cfg", "job", "task=pendulum", f"{OPTS}.num_collectors=2", f"{OPTS}.cpus_per_collector=512"],
            f"error: {OPTS}.cpus_per_collector=512 is invalid: the host",
        ),
    ],
)
def test_bad_input_exits_with_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    """Each invalid value exits 2 with one stderr line naming the setting, the value and the fix."""
    assert _fail(capsys, args).startswith(expected)


def test_cuda_on_a_machine_without_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    """device=cuda without a CUDA device is refused (on a GPU machine cuda:99 covers the same path)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    line = _fail(capsys, ["task=pendulum", "algo.trainer.device=cuda"])
    expected = "error: algo.trainer.device='cuda' is invalid: CUDA is not available on this machine"
    assert line == f"{expected}; use cpu (or auto)"


def test_resume_without_checkpoint(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """resume=<folder without checkpoints> says so and leaves no run folder behind."""
    line = _fail(capsys, ["task=pendulum", f"resume={tmp_path}", f"runs_root={tmp_path / 'runs'}"])
    assert line.startswith(f"error: resume='{tmp_path}' is invalid: ")
    assert "holds no model_*.pt checkpoint" in line
    assert not (tmp_path / "runs").exists()


def test_invalid_config_creates_no_run_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Validation happens before the run folder exists."""
    _fail(capsys, ["task=pendulum", f"{OPTS}.ring_capacity=0", f"runs_root={tmp_path / 'runs'}"])
    assert not (tmp_path / "runs").exists()


def test_cfg_job_prints_the_resolved_config(capsys: pytest.CaptureFixture[str]) -> None:
    """--cfg job prints the resolved config (task node applied, overrides applied) and exits 0."""
    with pytest.raises(SystemExit) as info:
        main(["--cfg", "job", "task=hopper", f"{OPTS}.num_collectors=8"])
    out = capsys.readouterr().out
    assert info.value.code == 0
    assert "env_id: Hopper-v5" in out and "num_collectors: 8" in out


def test_subprocess_error_is_one_line_without_traceback() -> None:
    """In a real process a malformed override prints one line on stderr and exits 2."""
    result = subprocess.run(
        [sys.executable, str(APP_DIR), "task=pendulum", "oops"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: malformed override: 'oops' (missing EQUAL at '<EOF>'); write overrides as key=value, "
        "e.g. algo.trainer.async_options.num_collectors=2"
    ]


def _saved_run(tmp_path: Path, args: list[str], iteration: int) -> Path:
    """A run folder holding one checkpoint of the agent ``args`` configure, at ``iteration``."""
    from fastsac_core import save_checkpoint
    from fastsac_core.testing import make_agent
    from fastsac_trainer.arguments import composed

    run = composed(args).run
    agent = make_agent(run.dims, run.agent, "cpu", num_envs=run.config["task"]["num_envs"])
    folder = tmp_path / "old"
    save_checkpoint(RunLayout(folder).checkpoint(iteration), agent, extra={"iteration": iteration})
    return folder


SMALL = ["task=pendulum", "task.num_envs=4", "algo.agent.buffer_size=16", "algo.trainer.asynchronous=false"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (["algo.agent.actor_hidden_dim=24"], "error: algo.agent.actor_hidden_dim=24 does not match"),
        (["algo.agent.buffer_size=32"], "error: algo.agent.buffer_size=32 does not match"),
        (["task.num_envs=8"], "error: task.num_envs=8 over 1 learner(s) gives 8 envs per learner, but"),
        (["task=halfcheetah", "task.num_envs=4"], "error: task=halfcheetah does not match"),
        (["algo.agent.v_max=200"], "error: algo.agent.v_max=200 does not match"),
        (
            ["algo.agent.reward_normalization=true"],
            "error: algo.agent.reward_normalization=true algo.agent.normalized_v_max=10 does not match",
        ),
    ],
)
def test_a_resume_that_does_not_fit_its_checkpoint_is_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, change: list[str], expected: str
) -> None:
    """resume= with another task, network, replay, env count or value support: one line, nothing written."""
    folder = _saved_run(tmp_path, SMALL, 4)
    line = _fail(capsys, [*SMALL, f"resume={folder}", *change])
    assert line.startswith(expected), line
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoints"], "nothing written into the run folder"


def test_a_resume_past_the_budget_says_there_is_nothing_to_train(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """resume= of a checkpoint at or past num_learning_iterations: says so, exits 0, writes nothing."""
    folder = _saved_run(tmp_path, SMALL, 4)
    with pytest.raises(SystemExit) as info:
        main([*SMALL, f"resume={folder}", "algo.trainer.num_learning_iterations=4"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert (
        "nothing to train:" in out and "is at iteration 4 and algo.trainer.num_learning_iterations=4" in out
    )
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoints"]


def test_resuming_an_older_checkpoint_into_its_own_folder_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """resume=<an earlier checkpoint> without run_name: refused, the later checkpoints stay untouched."""
    folder = _saved_run(tmp_path, SMALL, 4)
    _saved_run(tmp_path, SMALL, 6)
    RunLayout(folder).config.write_text("task:\n  name: pendulum\n")
    older = RunLayout(folder).checkpoint(4)
    line = _fail(capsys, [*SMALL, f"resume={older}"])
    assert line.startswith(f"error: resume={older} is not the latest checkpoint of {folder}"), line
    assert "model_0000006.pt is" in line and "add run_name=<new name> to branch off" in line
    assert sorted(p.name for p in RunLayout(folder).checkpoints.iterdir()) == [
        "model_0000004.pt",
        "model_0000006.pt",
    ]


def test_a_new_run_never_writes_into_another_runs_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """run_name= of a non-empty folder without resume=: one line, the folder stays as it was."""
    taken = tmp_path / "runs" / "taken"
    taken.mkdir(parents=True)
    RunLayout(taken).config.write_text("another run\n")
    args = [*SMALL, "algo.trainer.num_learning_iterations=2", f"runs_root={taken.parent}", "run_name=taken"]
    line = _fail(capsys, args)
    assert line == (
        f"error: run_name='taken' is invalid: {taken} is not empty; choose another run_name, "
        "or leave it unset for a new <task>-<time> folder"
    )
    assert [p.name for p in taken.iterdir()] == ["config.yaml"]
    assert RunLayout(taken).config.read_text() == "another run\n"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["hydra.run.dir=/tmp/x"],
            "error: hydra.run.dir='/tmp/x' is not supported: the trainer uses no hydra settings (hydra.*, "
            "hydra/...); its run folder is runs_root/run_name: set runs_root=DIR run_name=NAME instead",
        ),
        (["hydra/launcher=basic"], "error: hydra/launcher='basic' is not supported: the trainer uses no"),
        (
            ["--multirun", "seed=1,2"],
            "error: --multirun is not supported: the trainer runs one configuration per command; "
            "for seeds use seed=1,2,3, else start one command per setting",
        ),
        (["-m"], "error: -m is not supported: the trainer runs one configuration per command"),
        (
            ["--config-name", "x"],
            "error: --config-name is not an option: the trainer takes key=value overrides only; "
            "see `trainer --help`",
        ),
    ],
)
def test_hydra_options_the_trainer_does_not_use_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], expected: str
) -> None:
    """hydra.* keys, hydra groups, --multirun and other flags: one line, nothing written."""
    runs = tmp_path / "runs"
    small = [*SMALL, "algo.trainer.num_learning_iterations=2", f"runs_root={runs}", "console=plain"]
    assert _fail(capsys, [*small, *args]).startswith(expected)
    assert _fail(capsys, ["--cfg", "job", *args]).startswith(expected)
    assert not runs.exists()


def test_an_invalid_profiler_variable_is_refused_before_the_run_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FASTSAC_PROFILE_LEARNER=abc: one line naming the variable and the fix, no run folder."""
    monkeypatch.setenv("FASTSAC_PROFILE_LEARNER", "abc")
    runs = tmp_path / "runs"
    args = ["task=pendulum", "algo.trainer.device=cpu", f"runs_root={runs}", "console=plain"]
    assert _fail(capsys, args) == (
        "error: FASTSAC_PROFILE_LEARNER='abc' is neither a number of learner iterations (N) nor N@U"
        " (N iterations once U updates ran); unset it or use e.g. 50, or 50@20000 for a window in the"
        " steady state"
    )
    assert not runs.exists()


@pytest.mark.parametrize("command", ["eval", "export"])
def test_a_missing_checkpoint_names_the_checkpoint_option(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    """`trainer eval|export checkpoint=<missing>` names checkpoint=, not resume=."""
    missing = tmp_path / "nope"
    assert _fail(capsys, [command, f"checkpoint={missing}"]) == (
        f"error: checkpoint='{missing}' is invalid: no such file or folder; pass a run folder (runs/<run>) "
        "or a checkpoint file (runs/<run>/checkpoints/model_0001000.pt)"
    )
