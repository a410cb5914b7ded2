"""``from fastsac_trainer import train``: the CLI's run from Python, its result, its errors as exceptions."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from fastsac_trainer import TrainerAppError, TrainResult, train
from fastsac_trainer.api import hydra_value
from fastsac_trainer.testing import TINY_RUN


@pytest.fixture
def point_env(point_env_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The wiki's ``point_env`` module, imported from its folder outside the workspace."""
    monkeypatch.syspath_prepend(str(point_env_dir))
    yield importlib.import_module("point_env")
    sys.modules.pop("point_env", None)


@pytest.mark.slow
def test_train_with_the_env_class_passed_directly(tmp_path: Path, point_env: ModuleType) -> None:
    """The class itself trains in real collector processes; the result has folder, checkpoint, metrics."""
    runs = tmp_path / "runs"
    result = train(
        "gym",
        env_factory=point_env.PointEnv,
        env_kwargs={"episode_steps": 3},
        overrides=[
            *TINY_RUN,
            "algo.trainer.async_options.num_collectors=2",
            f"runs_root={runs}",
            "run_name=api",
        ],
    )
    assert isinstance(result, TrainResult)
    assert result.run_dir == runs / "api" and result.stop_reason == "completed"
    assert result.last_checkpoint == runs / "api" / "checkpoints" / "model_0000006.pt"
    assert result.last_checkpoint.is_file() and result.iterations == 6 and result.env_steps >= 24
    assert "rollout/mean_return" in result.metrics and result.metrics["rollout/mean_return"] < 0
    assert (runs / "api" / "overrides.txt").read_text().count("task.env_factory='point_env:PointEnv'") == 1

    again = train("gym", overrides=[f"resume={runs / 'api'}"])  # the saved overrides bring the env back
    assert again.stop_reason == "nothing_to_train" and again.last_checkpoint == result.last_checkpoint


def _local_factory(num_envs: int, seed: int) -> object:
    raise AssertionError("never called")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"env_id": "CartPole-v1"}, "task.env_id='CartPole-v1' is invalid: its action space is Discrete"),
        ({"env_factory": lambda n, s: None}, "cannot be imported by name"),
        (
            {"env_factory": _local_factory, "overrides": ["algo.agent.gama=1"]},
            "algo.agent.gama is not a setting",
        ),
        ({"env_id": "Hopper-v5", "env_kwargs": {"bad key": 1}}, "env_kwargs key 'bad key' is invalid"),
        ({"env_id": "Hopper-v5", "overrides": ["--multirun"]}, "--multirun is not supported"),
        ({"env_id": "Hopper-v5", "overrides": ["seed=1,2"]}, "call train() once per seed"),
        ({"env_id": "Hopper-v5", "overrides": ["logger=tensorboard,bogus"]}, "logger="),
    ],
)
def test_mistakes_raise_the_command_lines_one_line_error(kwargs: dict[str, object], message: str) -> None:
    """Invalid settings and factories no process could import raise TrainerAppError with one line."""
    with pytest.raises(TrainerAppError) as info:
        train("gym", **{"overrides": ["algo.trainer.device=cpu"], **kwargs})  # type: ignore[arg-type]
    assert message in str(info.value) and "\n" not in str(info.value)


def test_module_level_functions_in_main_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A factory defined in __main__ is refused: spawned collectors and `trainer eval` could not import it."""
    monkeypatch.setattr(_local_factory, "__module__", "__main__")
    with pytest.raises(TrainerAppError, match="it is defined in __main__"):
        train("gym", env_factory=_local_factory)


def test_hydra_value_round_trips_through_the_override_grammar() -> None:
    """Kwargs with quotes, nesting and None are written so that hydra parses them back to the same values."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    value = {
        "name": "it's a \\ path\\'",
        "end": "C:\\",
        "sizes": [1, 2.5],
        "on": True,
        "none": None,
        "sub": {"k": "v"},
    }
    parsed = OverridesParser.create().parse_override(f"task.env_kwargs={hydra_value(value, 'env_kwargs')}")
    assert parsed.value() == value
