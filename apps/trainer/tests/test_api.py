"""``from fastsac_trainer import train``: the CLI's run from Python, its result, its errors as exceptions."""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import fastsac_async
from fastsac_async import PrestartedWorkers
from fastsac_trainer import TrainerAppError, TrainResult, train
from fastsac_trainer.api import hydra_value
from fastsac_trainer.testing import TINY_RUN

README = Path(__file__).resolve().parents[3] / "README.md"


@pytest.fixture
def point_env(point_env_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The wiki's ``point_env`` module, imported from its folder outside the workspace."""
    monkeypatch.syspath_prepend(str(point_env_dir))
    yield importlib.import_module("point_env")
    sys.modules.pop("point_env", None)


class _RecordedServer(PrestartedWorkers):
    """The trainer's early fork server, as the run treats it (none is started: the calls are recorded)."""

    def __init__(self) -> None:
        super().__init__(None)
        self.calls: list[str] = []

    def hand_over(self) -> None:
        self.calls.append("hand_over")
        super().hand_over()

    def cancel(self) -> None:
        if "hand_over" not in self.calls:
            self.calls.append("cancel")
        super().cancel()


def _recorded_server(monkeypatch: pytest.MonkeyPatch) -> _RecordedServer:
    server = _RecordedServer()
    monkeypatch.setattr(fastsac_async, "prestart_workers", lambda preload=(), preload_learner=True: server)
    return server


@pytest.mark.slow
def test_train_with_the_env_class_passed_directly(
    tmp_path: Path, point_env: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
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

    server = _recorded_server(monkeypatch)
    again = train("gym", overrides=[f"resume={runs / 'api'}"])  # the saved overrides bring the env back
    assert again.stop_reason == "nothing_to_train" and again.last_checkpoint == result.last_checkpoint
    assert server.calls == ["cancel"], "no engine runs: the early fork server is stopped"


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
        ({"env_id": "Hopper-v5", "overrides": "seed=3"}, "pass a list of 'key=value' strings"),
        ({"env_id": "Hopper-v5", "overrides": None}, "pass a list of 'key=value' strings"),
        ({"env_id": "Hopper-v5", "overrides": [1, 2]}, "pass a list of 'key=value' strings"),
    ],
)
def test_mistakes_raise_the_command_lines_one_line_error(
    kwargs: dict[str, object], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Invalid settings and factories raise TrainerAppError with one line; the early fork server stops."""
    server = _recorded_server(monkeypatch)
    with pytest.raises(TrainerAppError) as info:
        train("gym", **{"overrides": ["algo.trainer.device=cpu"], **kwargs})  # type: ignore[arg-type]
    assert message in str(info.value) and "\n" not in str(info.value)
    assert server.calls in ([], ["cancel"]), "cancelled, or never started (refused before any run)"


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


def _readme_python() -> str:
    """The README's Python example (its one python block), as written there."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 1, "README.md must hold exactly one python block"
    return blocks[0]


# Run in the script's process only (the variable is gone before any worker starts): every train() of the
# script gets the tiny settings after its own, so the README's example runs as written in seconds.
_TINY_SITECUSTOMIZE = """
import json, os

_tiny = os.environ.pop("README_TEST_TINY_OVERRIDES", None)
if _tiny is not None:
    import fastsac_trainer.api as _api

    _train = _api.train

    def _tiny_train(*args, overrides=(), **kwargs):
        return _train(*args, overrides=[*overrides, *json.loads(_tiny)], **kwargs)

    _api.train = _tiny_train
"""


@pytest.mark.slow
def test_the_readme_python_example_runs_as_a_script(tmp_path: Path) -> None:
    """The README's example, saved as a script, trains (a tiny budget) and acts, in one run folder."""
    script = tmp_path / "example.py"
    script.write_text(_readme_python(), encoding="utf-8")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_TINY_SITECUSTOMIZE, encoding="utf-8")
    tiny = [*TINY_RUN, "algo.trainer.eval_interval_s=null"]
    env = {**os.environ, "PYTHONPATH": str(site), "README_TEST_TINY_OVERRIDES": json.dumps(tiny)}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    (run,) = (tmp_path / "runs").iterdir()  # the script's own run, no worker's
    printed = done.stdout.splitlines()[-1].split()
    assert printed[0] == str(Path("runs") / run.name) and printed[-1] == "completed", done.stdout
    assert Path(tmp_path, printed[1]).is_file()


def _run_as_main(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``script`` as ``python script.py`` would: as ``__main__``, a module the workers import again."""
    main = ModuleType("__main__")
    main.__file__, main.__spec__ = str(script), None
    monkeypatch.setitem(sys.modules, "__main__", main)
    exec(compile(script.read_text(encoding="utf-8"), str(script), "exec"), main.__dict__)


_SCRIPT = """from fastsac_trainer import train

{call}
"""
_CALL = 'train("gym", env_id="Hopper-v5", overrides=["algo.agent.gama=1"])'


def test_an_unguarded_train_at_a_scripts_top_level_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train() at a script's top level, outside the main guard: one line naming the line; nothing is made."""
    script = tmp_path / "script.py"
    script.write_text(_SCRIPT.format(call=_CALL), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TrainerAppError) as info:
        _run_as_main(script, monkeypatch)
    message = str(info.value)
    assert message.startswith(f"train() is called at line 3 of {script} outside `if __name__ ==")
    assert "put the call under" in message and "\n" not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["script.py"]


def test_a_guarded_train_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the main guard (directly or through a function), train() goes on: here to the settings' error."""
    script = tmp_path / "script.py"
    script.write_text(
        _SCRIPT.format(call=f"def main():\n    {_CALL}\n\n\nif __name__ == '__main__':\n    main()"),
        encoding="utf-8",
    )
    with pytest.raises(TrainerAppError, match=r"algo\.agent\.gama is not a setting"):
        _run_as_main(script, monkeypatch)


def test_train_in_a_worker_importing_the_script_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker importing the main script (multiprocessing's start-up flag): one line, before anything."""
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(TrainerAppError) as info:
        train("gym", env_id="Hopper-v5", overrides=["algo.agent.gama=1"])
    assert str(info.value).startswith("train() is called while a worker process of a run imports the main")
    assert "\n" not in str(info.value)
