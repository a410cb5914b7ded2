"""Resume keeps the run's settings: overrides.txt holds the merged overrides, one per key."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fastsac_async.run_layout import RunLayout
from fastsac_core import peek_checkpoint
from fastsac_trainer.cli import main
from fastsac_trainer.testing import TINY_PENDULUM

SYNC_TINY = [*TINY_PENDULUM, "algo.trainer.save_interval=2", "algo.trainer.asynchronous=false"]


def _train(args: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 0


def test_one_launch_settings_are_never_saved() -> None:
    """time_limit_s, stop_grace_s, checkpoint_signal and console stay with their launch, also on a resume."""
    from fastsac_trainer.arguments import composed, one_launch_settings

    launch = ["algo.trainer.time_limit_s=8", "algo.trainer.stop_grace_s=20", "console=rich"]
    first = composed([*SYNC_TINY, *launch, "algo.trainer.checkpoint_signal=SIGUSR2"])
    assert first.run.config["algo"]["trainer"]["time_limit_s"] == 8, "it applies to its own launch"
    assert not one_launch_settings(first.settings), first.settings
    assert one_launch_settings(["algo.agent.gamma=0.9", *launch]) == launch


@pytest.mark.slow
def test_two_resumes_in_a_row_keep_the_runs_settings(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A second resume= starts from the merged overrides of the first: task, sizes, gamma, not time limits."""
    run_dir = tmp_path / "runs" / "r"
    _train(
        [*SYNC_TINY, "algo.trainer.num_learning_iterations=4", f"runs_root={run_dir.parent}", "run_name=r"]
    )
    first = [f"resume={run_dir}", "algo.trainer.num_learning_iterations=6", "algo.agent.gamma=0.9"]
    _train([*first, "algo.trainer.time_limit_s=600"])
    out = capfd.readouterr().out
    assert "(iteration 4); replay buffer of 8 transitions from iteration 4, written " in out, out
    assert out.rstrip().count("; this launch only: algo.trainer.time_limit_s=600") == 1, out
    # A run saved before issue #30 kept its launch's time limit in overrides.txt: it is ignored.
    with RunLayout(run_dir).overrides.open("a") as saved:
        saved.write("algo.trainer.time_limit_s=0.001\n")
    _train([f"resume={run_dir}", "algo.trainer.num_learning_iterations=8"])

    assert peek_checkpoint(RunLayout(run_dir).checkpoint(8))["extra"]["iteration"] == 8
    saved = OmegaConf.load(RunLayout(run_dir).config)
    assert saved.task.name == "pendulum" and saved.task.num_envs == 2
    assert saved.algo.agent.gamma == 0.9, "a setting of the first resume survives the second"
    lines = RunLayout(run_dir).overrides.read_text().splitlines()
    keys = [line.partition("=")[0] for line in lines]
    assert len(keys) == len(set(keys)), f"one entry per key: {lines}"
    assert "algo.trainer.num_learning_iterations=8" in lines and "algo.agent.gamma=0.9" in lines
    assert not [line for line in lines if line.startswith(("resume=", "run_name="))], lines
    assert not [line for line in lines if "time_limit_s" in line], lines
    assert saved.algo.trainer.time_limit_s is None, "the second resume ran to its budget, without a limit"


def test_an_env_count_moved_for_this_machine_is_saved_for_the_resume() -> None:
    """A num_envs that sizing or the CPU profile moved is saved, so a resume on another machine keeps it."""
    from fastsac_trainer.arguments import composed as _composed

    composed = _composed(["task=humanoid", "algo.trainer.asynchronous=true", "algo.trainer.device=cpu"])
    moved = composed.run.config["task"]["num_envs"]
    assert moved != 448, "this CPU learner's profile caps the env count"
    assert f"task.num_envs={moved}" in composed.settings
    kept = _composed(["task=humanoid", "task.num_envs=448", "algo.trainer.device=cpu"])
    assert [o for o in kept.settings if o.startswith("task.num_envs=")] == ["task.num_envs=448"]


def test_a_resume_whose_replay_does_not_fit_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A whole replay file of another layout is refused in one line, the file kept; an unreadable one is not.

    The refusal exits 2 with the fix; an unreadable file has nothing to keep: the run restarts empty.
    """
    from fastsac_core import FastSACConfig, ReplayBuffer, save_replay
    from fastsac_trainer.arguments import composed

    run_dir = tmp_path / "runs" / "r"
    args = [*SYNC_TINY, "algo.trainer.num_learning_iterations=4", f"runs_root={run_dir.parent}", "run_name=r"]
    _train(args)
    run = composed(args).run
    replay = RunLayout(run_dir).replay(0)
    other = ReplayBuffer.of(
        run.dims, FastSACConfig(**{**vars(run.agent), "buffer_size": 8}), 4
    )  # 4 envs, not 2
    save_replay(replay, other.snapshot(), gstep=4)
    before = replay.read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main([f"resume={run_dir}", "algo.trainer.num_learning_iterations=6"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1, err
    assert f"replay file {str(replay)!r} does not fit this buffer" in err and "move" in err, err
    assert replay.read_bytes() == before and not RunLayout(run_dir).checkpoint(6).exists()
    replay.write_bytes(b"torn")  # unreadable: nothing to keep, so no refusal, an empty start
    _train([f"resume={run_dir}", "algo.trainer.num_learning_iterations=6"])
    assert RunLayout(run_dir).checkpoint(6).is_file()


@pytest.mark.slow
def test_a_resume_whose_iterations_would_hold_other_env_steps_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Twice the envs over twice the learners (the envs per learner kept): refused, nothing written.

    The checkpoint records its env steps; TensorBoard's x axis would have jumped from 8 to 12 at the
    resume's first snapshot (iterations times the new env count).
    """
    run_dir = tmp_path / "runs" / "r"
    args = [*SYNC_TINY, "algo.trainer.num_learning_iterations=4", f"runs_root={run_dir.parent}", "run_name=r"]
    _train(args)
    checkpoint = RunLayout(run_dir).checkpoint(4)
    assert peek_checkpoint(checkpoint)["extra"]["env_steps"] == 8
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    capsys.readouterr()
    options = "algo.trainer.async_options"
    with pytest.raises(SystemExit) as info:
        main([f"resume={run_dir}", "algo.trainer.num_learning_iterations=6", "algo.trainer.asynchronous=true",
              "algo.trainer.device=cpu", "task.num_envs=4", f"{options}.num_learners=2",
              f"{options}.num_collectors=2", f"{options}.learner_devices=[cpu,cpu]"])  # fmt: skip
    err = capsys.readouterr().err
    assert info.value.code == 2 and err == (
        f"error: task.num_envs=4 gives 4 env steps per iteration, but {checkpoint} recorded 8 env steps at "
        "iteration 4 (2 per iteration): a run's env-step axis, budget and cadences count iterations of one "
        "size; resume with task.num_envs=2 algo.trainer.async_options.num_learners=1, or start a new run "
        "(run_name=...) for another env count\n"
    )
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before, "nothing written"


def test_the_env_steps_of_an_iteration_count_every_host(tmp_path: Path) -> None:
    """A checkpoint of 2 hosts x 2 envs resumes on 2 hosts of 2 envs, not 1; one without env steps always."""
    from fastsac_async import HostGroup
    from fastsac_core import save_checkpoint
    from fastsac_core.testing import make_agent
    from fastsac_trainer.arguments import composed
    from fastsac_trainer.config.exceptions import TrainerAppError
    from fastsac_trainer.launch import check_resumable

    run = composed([*SYNC_TINY, "algo.agent.buffer_size=16"]).run
    agent = make_agent(run.dims, run.agent, "cpu", num_envs=2)
    two_hosts = HostGroup(host_rank=1, num_hosts=2, store_host="node0", store_port=29400, store_prefix="r")
    recorded = save_checkpoint(tmp_path / "a.pt", agent, extra={"iteration": 5, "env_steps": 5 * 2 * 2})
    assert check_resumable(recorded, run, two_hosts) == 5
    with pytest.raises(TrainerAppError, match=r"^task.num_envs=2 gives 2 env steps per iteration, but .* "
                       r"recorded 20 env steps at iteration 5 \(4 per iteration\): .*; resume with "
                       r"task.num_envs=4 algo.trainer.asynchronous=true "
                       r"algo.trainer.async_options.num_learners=2, or start"):  # fmt: skip
        check_resumable(recorded, run)
    older = save_checkpoint(tmp_path / "b.pt", agent, extra={"iteration": 5})
    assert check_resumable(older, run) == 5 and check_resumable(older, run, two_hosts) == 5


def test_the_settings_a_refused_resume_names_resume_it(tmp_path: Path) -> None:
    """A checkpoint of 1 learner x 2 envs resumed over 2 learners x 2: the fix named passes every check."""
    import re

    from fastsac_core import save_checkpoint
    from fastsac_core.testing import make_agent
    from fastsac_trainer.arguments import composed
    from fastsac_trainer.config.exceptions import TrainerAppError
    from fastsac_trainer.launch import check_resumable

    options = "algo.trainer.async_options"
    asynchronous = [*TINY_PENDULUM, "algo.agent.buffer_size=16", "algo.trainer.asynchronous=true",
                    "algo.trainer.device=cpu", f"{options}.num_collectors=2"]  # fmt: skip
    run = composed([*asynchronous, "task.num_envs=4", f"{options}.num_learners=2"]).run
    agent = make_agent(run.dims, run.agent, "cpu", num_envs=2)
    checkpoint = save_checkpoint(tmp_path / "a.pt", agent, extra={"iteration": 5, "env_steps": 5 * 2})
    with pytest.raises(TrainerAppError) as info:
        check_resumable(checkpoint, run)
    fix = re.search(r"; resume with (.*), or start a new run", str(info.value))
    assert fix is not None, info.value
    assert fix.group(1) == f"task.num_envs=2 {options}.num_learners=1"
    assert check_resumable(checkpoint, composed([*asynchronous, *fix.group(1).split()]).run) == 5


def test_a_resume_under_another_value_support_names_the_checkpoints_and_it_resumes(tmp_path: Path) -> None:
    """A critic trained on v_max 110 is not read on 200's atoms: the refusal's fix passes the check."""
    import re

    import torch

    from fastsac_core import save_checkpoint
    from fastsac_core.testing import make_agent
    from fastsac_trainer.arguments import composed
    from fastsac_trainer.config.exceptions import TrainerAppError
    from fastsac_trainer.launch import check_resumable

    base = [*SYNC_TINY, "algo.agent.buffer_size=16"]
    trained = composed(base).run
    assert trained.agent.support_settings == {"reward_normalization": False, "v_min": -10.0, "v_max": 110.0}
    agent = make_agent(trained.dims, trained.agent, "cpu", num_envs=2)
    checkpoint = save_checkpoint(tmp_path / "a.pt", agent, extra={"iteration": 5, "env_steps": 10})
    with pytest.raises(TrainerAppError) as info:
        check_resumable(checkpoint, composed([*base, "algo.agent.v_max=200"]).run)
    assert str(info.value).startswith(
        f"algo.agent.v_max=200 does not match {checkpoint}, whose critics were "
    )
    fix = re.search(r"; resume with (.*), or start a new run", str(info.value))
    assert fix is not None and fix.group(1) == "algo.agent.v_max=110", info.value
    assert check_resumable(checkpoint, composed([*base, "algo.agent.v_max=200", fix.group(1)]).run) == 5
    normalised = composed([*base, "algo.agent.reward_normalization=true"]).run
    with pytest.raises(TrainerAppError, match=r"resume with algo.agent.reward_normalization=false "
                       r"algo.agent.v_min=-10 algo.agent.v_max=110, or start"):  # fmt: skip
        check_resumable(checkpoint, normalised)
    payload = torch.load(checkpoint, weights_only=True)  # a checkpoint of a trainer before normalisation
    for key in ("reward_normalization", "normalized_v_max"):
        del payload["config"][key]
    torch.save(payload, tmp_path / "older.pt")
    assert check_resumable(tmp_path / "older.pt", trained) == 5
    with pytest.raises(TrainerAppError, match=r"resume with algo.agent.reward_normalization=false "):
        check_resumable(tmp_path / "older.pt", normalised)
    odd = composed([*base, "algo.agent.v_max=1234567.125"]).run  # a top that six digits would round
    odd_checkpoint = save_checkpoint(
        tmp_path / "b.pt", make_agent(odd.dims, odd.agent, "cpu", num_envs=2), extra={"iteration": 5}
    )
    with pytest.raises(TrainerAppError) as info:
        check_resumable(odd_checkpoint, trained)
    fix = re.search(r"; resume with (.*), or start a new run", str(info.value))
    assert fix is not None and fix.group(1) == "algo.agent.v_max=1234567.125", info.value
    assert check_resumable(odd_checkpoint, composed([*base, fix.group(1)]).run) == 5
