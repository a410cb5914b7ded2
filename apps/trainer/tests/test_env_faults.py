"""A user's env that misbehaves is named in one line: no silent wrong data, no traceback, no hang.

The gymnasium adapter gives each env an action of its own every step (an env may keep it), refuses an
observation of another shape than its space's (numpy would broadcast it) and an env without a time
limit; a batched env of the user's is reset and stepped once when the run is planned, so wrong
shapes or a NaN there are refused before anything starts; later, the synchronous trainer names an env
that raised (in training or an evaluation), where, and the file with the traceback; ``trainer eval``
takes a lone checkpoint's env as ``task.env_id`` and names its env's exception in one line; an
interpolation in a value is one line, and the Python API escapes ``${``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest

from fastsac_async.run_layout import RunLayout
from fastsac_core import EnvCall, EnvCallError, EnvOutputError
from fastsac_trainer.api import hydra_value
from fastsac_trainer.cli import main
from fastsac_trainer.config.compose import compose_config
from fastsac_trainer.tasks import MujocoBatchedEnv, TaskError
from fastsac_trainer.testing import TINY_RUN

FAULTY = '''
import numpy as np
from point_env import PointEnv


class Faulty(PointEnv):
    """The wiki's point env, going wrong at its `after`-th step in the way `fault` names."""

    def __init__(self, num_envs, seed, fault="none", after=1):
        super().__init__(num_envs, seed)
        self.fault, self.after, self.steps = fault, after, 0

    def step(self, actions):
        result = super().step(actions)
        self.steps += 1
        if self.steps < self.after:
            return result
        if self.fault == "raise":
            raise ValueError("the simulator blew up")
        if self.fault == "nan_reward":
            result.rewards[0] = np.nan
        if self.fault == "shape":
            object.__setattr__(result, "obs", np.zeros((self.num_envs, 3), np.float32))
        return result


def make(num_envs, seed, fault="none", after=1):
    return Faulty(num_envs, seed, fault, after)
'''


class _Keeper(gym.Env[np.ndarray, np.ndarray]):
    """Rewards the change of its action since the last step (an action-rate term): it keeps the action."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, obs_shape: tuple[int, ...] = (2,)) -> None:
        self.previous: np.ndarray | None = None
        self.obs_shape = obs_shape

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.previous = None
        return np.zeros(self.obs_shape, np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        change = 0.0 if self.previous is None else float(np.abs(action - self.previous).sum())
        self.previous = action  # kept as given, as such envs do
        return np.zeros(self.obs_shape, np.float32), change, False, False, {}


def _register() -> None:
    for name, kwargs, limit in (
        ("KeeperQA-v0", {}, 50),
        ("BroadcastQA-v0", {"obs_shape": (1,)}, 50),
        ("EndlessQA-v0", {}, None),
    ):
        if name not in gym.registry:
            gym.register(name, entry_point=_Keeper, kwargs=kwargs, max_episode_steps=limit)


def test_each_env_keeps_the_action_it_was_given() -> None:
    """An env that keeps its action sees it unchanged after the next batched step (no reused buffer)."""
    _register()
    env = MujocoBatchedEnv("KeeperQA-v0", 2, seed=0, keep_wrappers=True)
    env.reset()
    first = np.array([[0.5], [-0.5]], np.float32)
    env.step(first)
    result = env.step(np.array([[-0.5], [0.5]], np.float32))
    np.testing.assert_allclose(result.rewards, [1.0, 1.0])  # |a2 - a1|: 0 if a1 had been overwritten
    env.close()


def test_an_observation_of_another_shape_and_an_env_without_a_time_limit_are_one_line() -> None:
    """A (1,) obs of a (2,) space is refused, not broadcast; an env without a time limit asks for one."""
    _register()
    env = MujocoBatchedEnv("BroadcastQA-v0", 2, seed=0, keep_wrappers=True)
    with pytest.raises(
        TaskError, match=r"BroadcastQA-v0's reset\(\) returned an observation of shape \(1,\)"
    ) as caught:
        env.reset()
    assert isinstance(caught.value, EnvOutputError), "one line already: a collector passes it as it is"
    env.close()
    with pytest.raises(TaskError, match=r"EndlessQA-v0 registers no time limit.*task.max_episode_steps="):
        MujocoBatchedEnv("EndlessQA-v0", 2, seed=0, keep_wrappers=True)
    MujocoBatchedEnv("EndlessQA-v0", 2, seed=0, keep_wrappers=True, max_episode_steps=10).close()


def test_the_adapters_refusals_are_one_line_that_every_trainer_passes_as_it_is() -> None:
    """A step before reset or actions of another shape: an EnvOutputError, never "step() raised TaskError"."""
    _register()
    env = MujocoBatchedEnv("KeeperQA-v0", 2, seed=0, keep_wrappers=True)
    stepping = EnvCall(env, "step")  # the one rule of which exceptions are the env's own
    with pytest.raises(TaskError, match=r"step\(\) on KeeperQA-v0 before reset\(\)") as caught, stepping:
        env.step(np.zeros((2, 1), np.float32))
    assert isinstance(caught.value, EnvOutputError)
    env.reset()
    with (
        pytest.raises(TaskError, match=r"^actions of shape \(2, 3\) for 2 envs of KeeperQA-v0") as caught,
        stepping,
    ):
        env.step(np.zeros((2, 3), np.float32))
    assert isinstance(caught.value, EnvOutputError)
    env.close()


def test_an_installed_envs_exception_is_placed_in_its_code_not_in_the_adapter() -> None:
    """Pendulum's own TypeError is said raised at pendulum.py, never at the adapter's loop (ours)."""
    env = MujocoBatchedEnv("Pendulum-v1", 2, seed=0, env_kwargs={"g": "x"})
    env.reset()
    with pytest.raises(EnvCallError) as caught, EnvCall(env, "step"):
        env.step(np.zeros((2, 1), np.float32))
    said = str(caught.value)
    assert said.startswith("Pendulum-v1's step() raised TypeError: "), said
    assert re.search(r"\(raised at pendulum\.py:\d+ in step\)$", said), said
    env.close()


@pytest.fixture
def faulty_dir(point_env_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``faulty_env.py`` beside the wiki's ``point_env.py``, both importable here; forgotten after."""
    (point_env_dir / "faulty_env.py").write_text(FAULTY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(point_env_dir))
    yield point_env_dir
    for name in ("faulty_env", "point_env"):
        sys.modules.pop(name, None)


def _main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(args)
    code = info.value.code
    return code if isinstance(code, int) else -1, capsys.readouterr().err


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            "{fault:nan_reward}",
            "the task's env is invalid: Faulty's step() returned rewards holding nan (env 0 of 1)",
        ),
        ("{fault:shape}", "Faulty's step() returned observations of shape (1, 3); it must be (1, 2)"),
        (
            "{fault:raise}",
            "first reset and step: Faulty's step() raised ValueError: the simulator blew up "
            "(raised at faulty_env.py:",
        ),
    ],
)
@pytest.mark.usefixtures("faulty_dir")
def test_a_batched_env_that_fails_its_first_step_is_refused_before_anything_starts(
    kwargs: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A NaN, a wrong shape or an exception at the probe's first step: exit 2, one line naming the env."""
    code, err = _main(
        ["--cfg", "job", "task=gym", "task.env_factory=faulty_env:make", f"task.env_kwargs={kwargs}"], capsys
    )
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err, err


@pytest.mark.parametrize(
    ("stage", "where"),
    [
        ("training", ["task.env_kwargs={fault:raise,after:4}"]),  # the training envs' 4th step
        # an evaluation's envs at their 10th step, at iteration 2 (the training envs stepped twice)
        ("evaluation", ["task.env_kwargs={fault:raise,after:10}", "algo.trainer.eval_interval=2"]),
    ],
)
@pytest.mark.usefixtures("faulty_dir")
def test_an_env_that_raises_in_a_synchronous_run_is_one_line_with_its_place_and_traceback_file(
    stage: str,
    where: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sync trainer names the env's error and line, keeps the traceback in the run folder, exits 2."""
    monkeypatch.chdir(tmp_path)
    args = ["task=gym", "task.env_factory=faulty_env:make", *where, *TINY_RUN,
            "algo.trainer.asynchronous=false", "run_name=r"]  # fmt: skip
    code, err = _main(args, capsys)
    traceback_file = RunLayout(Path("runs") / "r").error_log("trainer")  # as the run names it: relative
    assert code == 2 and "Traceback" not in err, err
    assert "error: Faulty's step() raised ValueError: the simulator blew up (raised at faulty_env.py:" in err
    assert f"the run stopped (traceback: {traceback_file})" in err
    text = traceback_file.read_text(encoding="utf-8")
    assert "ValueError: the simulator blew up" in text
    assert ("in evaluate_policy" in text) == (stage == "evaluation"), text


def test_an_unresolvable_interpolation_is_one_line_and_the_api_escapes_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """${nothere} in an override: exit 2, one line with the escape; the API passes '${' as written."""
    code, err = _main(["--cfg", "job", "task=pendulum", "run_name=run_${nothere}"], capsys)
    assert code == 2 and "interpolation that does not resolve" in err and err.count("\n") == 1, err
    kwargs = {"s": "cost_${seed}", "t": "a\\${x}"}
    cfg = compose_config(
        ["task=gym", "task.env_id=Pendulum-v1", f"task.env_kwargs={hydra_value(kwargs, 'k')}"]
    )
    assert dict(cfg.task.env_kwargs) == kwargs


@pytest.mark.usefixtures("faulty_dir")
def test_a_lone_checkpoint_of_a_users_env_evaluates_with_task_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone checkpoint evaluates with task.env_factory=... (over task=gym); its env raising: one line."""
    monkeypatch.chdir(tmp_path)
    code, err = _main(["task=gym", "task.env_factory=faulty_env:make", *TINY_RUN, "run_name=r"], capsys)
    assert code == 0, err
    lone = tmp_path / "model.pt"
    lone.write_bytes(RunLayout(tmp_path / "runs" / "r").checkpoint(6).read_bytes())
    code, err = _main(["eval", f"checkpoint={lone}", "episodes=2"], capsys)
    assert code == 2 and "pass task=NAME, or task.env_id=ID" in err, err
    with pytest.raises(SystemExit) as info:
        main(["eval", f"checkpoint={lone}", "episodes=2", "task.env_factory=faulty_env:make",
              "task.env_kwargs={fault:none}"])  # fmt: skip
    out, err = capsys.readouterr()
    assert info.value.code == 0 and "faulty_env:make" in out and "over 2 episodes" in out, out + err
    code, err = _main(["eval", f"checkpoint={lone}", "episodes=2", "task.env_factory=faulty_env:make",
                       "task.env_kwargs={fault:raise,after:3}"], capsys)  # fmt: skip
    said = "error: Faulty's step() raised ValueError: the simulator blew up (raised at faulty_env.py:"
    assert code == 2 and err.startswith(said) and err.count("\n") == 1 and "Traceback" not in err, err


def test_an_env_import_that_raises_is_told_apart_from_one_not_found(
    faulty_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A module found whose own code raises says so (fix the module), not "put it on PYTHONPATH"."""
    (faulty_dir / "broken_envs.py").write_text("raise RuntimeError('no licence file')\n", encoding="utf-8")
    base = ["--cfg", "job", "task=gym", "task.env_id=Hopper-v5"]
    code, err = _main([*base, "task.env_import=broken_envs"], capsys)
    assert code == 2 and "importing broken_envs raised RuntimeError: no licence file; fix" in err, err
    code, err = _main([*base, "task.env_import=absent_envs"], capsys)
    assert code == 2 and "No module named 'absent_envs'; put the module's folder on PYTHONPATH" in err, err
    sys.modules.pop("broken_envs", None)
