"""``task=gym``: any registered gymnasium id, its wrappers kept, env_kwargs and env_import, spaces refused."""

from __future__ import annotations

import multiprocessing as mp
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from fastsac_trainer.cli import main
from fastsac_trainer.tasks import (
    GYM_TASK,
    MujocoBatchedEnv,
    MujocoEnvFactory,
    TaskError,
    check_spaces,
    env_factory_for,
    get_task,
    task_names,
)

SCALED_ID = "ScaledPendulum-v0"
REGISTER = f'''
"""Registers {SCALED_ID}: InvertedPendulum-v5 whose reward a registered wrapper multiplies by 10."""

import gymnasium as gym


def make_scaled(**kwargs):
    env = gym.make("InvertedPendulum-v5", **kwargs).unwrapped
    return gym.wrappers.TransformReward(env, lambda r: 10.0 * r)


if "{SCALED_ID}" not in gym.registry:
    gym.register("{SCALED_ID}", entry_point=make_scaled, max_episode_steps=1000)
'''


@pytest.fixture(scope="module")
def register_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A module outside the workspace whose import registers :data:`SCALED_ID`, on sys.path."""
    folder = tmp_path_factory.mktemp("register")
    (folder / "scaled_envs.py").write_text(REGISTER, encoding="utf-8")
    sys.path.insert(0, str(folder))
    try:
        yield folder
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("scaled_envs", None)


def _task(**values: object) -> dict[str, object]:
    return {"name": "gym", "env_id": None, "max_episode_steps": None, **values}


def test_registered_wrappers_are_kept_and_env_kwargs_reach_the_env(register_dir: Path) -> None:
    """The env's registered reward wrapper acts (reward 10 per upright step) and env_kwargs reach make."""
    factory = env_factory_for(
        _task(env_id=SCALED_ID, env_import="scaled_envs", env_kwargs={"reset_noise_scale": 0.0})
    )
    with factory(2, 0) as env:  # type: ignore[attr-defined]
        obs, _ = env.reset()
        assert np.array_equal(obs, np.zeros_like(obs))  # no reset noise: the kwarg reached the env
        result = env.step(np.zeros((2, 1), np.float32))
        assert np.allclose(result.rewards, 10.0)


def test_built_in_tasks_keep_the_unwrapped_fast_path() -> None:
    """A built-in task steps the unwrapped class; task=gym on the same id steps the wrapped env."""
    built_in = env_factory_for({"name": "hopper", "env_id": "Hopper-v5", "max_episode_steps": None})
    assert isinstance(built_in, MujocoEnvFactory) and not built_in.keep_wrappers
    gym_factory = env_factory_for(_task(env_id="Hopper-v5", max_episode_steps=3))
    assert isinstance(gym_factory, MujocoEnvFactory) and gym_factory.keep_wrappers
    with gym_factory(1, 0) as env:
        env.reset()
        truncated = [bool(env.step(np.zeros((1, 3), np.float32)).truncated[0]) for _ in range(3)]
        assert truncated == [False, False, True]  # the registered TimeLimit, given the override


def _build_in_child(factory: MujocoEnvFactory, queue: mp.Queue[float]) -> None:
    with factory(1, 0) as env:
        env.reset()
        queue.put(float(env.step(np.zeros((1, 1), np.float32)).rewards[0]))


def test_env_import_runs_in_a_fresh_spawned_process(register_dir: Path) -> None:
    """A spawned process (as collectors are) imports task.env_import before making the env it registers."""
    factory = env_factory_for(_task(env_id=SCALED_ID, env_import="scaled_envs"))
    assert isinstance(factory, MujocoEnvFactory)
    pickle.loads(pickle.dumps(factory))
    ctx = mp.get_context("spawn")
    queue: mp.Queue[float] = ctx.Queue()
    child = ctx.Process(target=_build_in_child, args=(factory, queue))
    child.start()
    try:
        assert queue.get(timeout=120) == pytest.approx(10.0)
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
            child.join(5)
        queue.close()
        queue.join_thread()
    assert child.exitcode == 0


def _refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main(["--cfg", "job", "algo.trainer.device=cpu", *args])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["task=gym", "task.env_id=CartPole-v1"],
            "task.env_id='CartPole-v1' is invalid: its action space is Discrete",
        ),
        (["task=gym"], "task=gym needs task.env_id=<registered gymnasium id>"),
        (["task=gym", "task.env_id=NoSuchEnv-v0"], "task.env_id='NoSuchEnv-v0' is invalid"),
        (
            ["task=pendulum", "task.env_id=Swimmer-v5"],
            "task.env_id='Swimmer-v5' is invalid: task=pendulum trains",
        ),
        (["task=hopper", "task.env_import=os"], "use task=gym task.env_import=... for your own environment"),
        (
            ["task=gym", "task.env_id=Hopper-v5", "task.env_import=no_such_module"],
            "task.env_import='no_such_module'",
        ),
    ],
)
def test_invalid_user_env_settings_are_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Non-flat-Box spaces, a missing or unknown id, gym settings on a built-in task: one line, exit 2."""
    assert message in _refused(args, capsys)


def test_non_flat_and_unbounded_spaces_are_refused() -> None:
    """An image Box obs, a Dict obs and unbounded actions each raise one line naming the space."""
    box = gym.spaces.Box(-1.0, 1.0, (2,))
    for obs, act, seen in (
        (gym.spaces.Box(0, 255, (8, 8, 3)), box, "Box(8, 8, 3)"),
        (gym.spaces.Dict({"a": box}), box, "Dict"),
        (box, gym.spaces.Box(-np.inf, np.inf, (2,)), "unbounded"),
    ):
        with pytest.raises(TaskError) as info:
            check_spaces("My-v0", obs, act)
        assert seen in str(info.value) and "\n" not in str(info.value)


def test_gym_task_has_generic_defaults_and_is_listed() -> None:
    """task=gym is registered last, has no env of its own, and needs nothing of the env's reward scale."""
    assert task_names()[-1] == "gym" and get_task("gym") is GYM_TASK
    cfg = GYM_TASK.agent_config()
    assert cfg.reward_normalization, "a support in scaled units: the env's reward scale is unknown"
    assert cfg.gamma == 0.995 and cfg.num_steps == 3, "the general recipe (wiki/tasks.md)"
    assert cfg.v_min <= -1000.0 and cfg.v_max >= 1000.0, "raw support (rn off): up to 10 per step at 0.99"
    assert cfg.batch_size % GYM_TASK.num_envs == 0
    with pytest.raises(TaskError, match=r"task\.env_id=<gymnasium id>"):
        GYM_TASK.env_factory()
    env = env_factory_for(_task(env_id="Hopper-v5"))(1, 0)
    try:
        assert isinstance(env, MujocoBatchedEnv)
    finally:
        env.close()
