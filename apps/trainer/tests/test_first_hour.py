"""A newcomer's first hour (issue #31): bad inputs, help for every command, imports of the quick paths.

Each bad input is one line and exit 2, creating nothing; a mistyped command gets the nearest one; help,
version and such mistakes answer without importing torch or hydra; a worker that fails once training
runs is named with its env's exception and where it was raised.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fastsac_async.run_layout import RunLayout
from fastsac_core import save_checkpoint
from fastsac_core.testing import make_agent
from fastsac_trainer.cli import main
from fastsac_trainer.commands import COMMANDS, command_help
from fastsac_trainer.config.exceptions import ConfigError
from fastsac_trainer.tasks import get_task, probe_dims
from fastsac_trainer.training import PRELOAD_DYNAMO_ENV

DICT_ENV = '''
"""Registers DictObs-v0: Box actions, but a Dict of observations (what the trainer cannot learn)."""

import gymnasium as gym
import numpy as np


class DictObs(gym.Env):
    observation_space = gym.spaces.Dict(
        {"position": gym.spaces.Box(-1.0, 1.0, (2,)), "goal": gym.spaces.Box(-1.0, 1.0, (2,))}
    )
    action_space = gym.spaces.Box(-1.0, 1.0, (2,))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"position": np.zeros(2, np.float32), "goal": np.zeros(2, np.float32)}, {}


if "DictObs-v0" not in gym.registry:
    gym.register("DictObs-v0", entry_point=DictObs)
'''

FAILING_ENV = '''
"""make(num_envs, seed, fail_at_step): a fake batched env whose step raises at step fail_at_step."""

from fastsac_async.testing import FailingEnvFactory


def make(num_envs, seed, fail_at_step):
    return FailingEnvFactory(fail_at_step)(num_envs, seed)
'''

MISSING_MODULE = "fastsac_no_such_module"
"""A module no test puts on the path: the env module of a run whose module is gone."""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder as a user has it: a pendulum run, runs whose env module is gone, a file, an env module."""
    root = tmp_path_factory.mktemp("world")
    spec = get_task("pendulum")
    agent = make_agent(probe_dims(spec.env_factory()), spec.agent_config(), "cpu", num_envs=2)
    tasks = {
        "pendulum": f"name: pendulum\n  env_id: {spec.env_id}\n  max_episode_steps: {spec.max_episode_steps}",
        "imported": f"name: gym\n  env_id: InvertedPendulum-v5\n  env_import: {MISSING_MODULE}",
        "factory": f"name: gym\n  env_id: null\n  env_factory: {MISSING_MODULE}:make",
    }
    for name, task in tasks.items():
        layout = RunLayout(root / name)
        layout.checkpoints.mkdir(parents=True)
        layout.config.write_text(f"task:\n  {task}\n")
        save_checkpoint(layout.checkpoint(4), agent, extra={"iteration": 4})
    (root / "afile").write_text("not a folder\n")
    (root / "mods").mkdir()
    (root / "mods" / "dict_obs_env.py").write_text(DICT_ENV)
    (root / "mods" / "failing_env.py").write_text(FAILING_ENV)
    return root


def _read_only_folder(world: Path) -> str:
    """A folder in which nothing can be created, even by root (who ignores permission bits)."""
    if os.geteuid() == 0:
        return "/sys/fastsac-runs"  # sysfs refuses mkdir to everyone
    folder = world / "read_only"
    folder.mkdir(exist_ok=True)
    folder.chmod(0o555)
    return str(folder / "runs")


def _train(world: Path, task: str = "pendulum") -> list[str]:
    """A small synchronous CPU run of ``task`` into ``world/runs``."""
    return [
        f"task={task}",
        "task.num_envs=2",
        "algo.trainer.asynchronous=false",
        "algo.trainer.device=cpu",
        "algo.trainer.num_learning_iterations=2",  # before the fix, some of these inputs trained
        "console=plain",
        f"runs_root={world / 'runs'}",
    ]


BAD_INPUTS: list[tuple[str, Callable[[Path], list[str]], str]] = [
    # Issue #31 item 2: each of these ended in a traceback.
    (
        "runs_root read-only",
        lambda w: [*_train(w), f"runs_root={_read_only_folder(w)}"],
        "error: runs_root='",
    ),
    (
        "runs_root a file",
        lambda w: [*_train(w), f"runs_root={w / 'afile'}"],
        "error: runs_root='{w}/afile' is invalid: {w}/afile is a file, not a folder",
    ),
    (
        "eval of a pendulum run with another task's env",
        lambda w: ["eval", f"checkpoint={w / 'pendulum'}", "task=humanoid"],
        "error: task='humanoid' is invalid for checkpoint=",
    ),
    (
        "eval of an env_import run without its module",
        lambda w: ["eval", f"checkpoint={w / 'imported'}"],
        f"error: task.env_import='{MISSING_MODULE}' is invalid: No module named",
    ),
    (
        "eval of an env_factory run without its module",
        lambda w: ["eval", f"checkpoint={w / 'factory'}"],
        f"error: task.env_factory='{MISSING_MODULE}:make' is invalid: No module named",
    ),
    (
        "export to a folder that cannot hold files",
        lambda w: ["export", f"checkpoint={w / 'pendulum'}", "out=/proc/x.onnx"],
        "error: out='/proc/x.onnx' is invalid: it cannot be written",
    ),
    (
        "plot to a format matplotlib does not write",
        lambda w: ["plot", str(w / "pendulum"), "out=x.xyz"],
        "error: out='x.xyz' is invalid: matplotlib writes no .xyz files",
    ),
    # Item 3: a run name is one folder name.
    (
        "run_name outside runs_root",
        lambda w: [*_train(w), "run_name=../../somewhere"],
        "error: run_name='../../somewhere' is invalid: a run name is one folder name inside runs_root",
    ),
    # Item 5: each message blames the setting at fault.
    (
        "env_kwargs the env does not take",
        lambda w: [
            *_train(w, "gym"),
            "task.env_id=InvertedPendulum-v5",
            "task.env_kwargs={nonexistent_kw:1}",
        ],
        "error: task.env_kwargs={'nonexistent_kw': 1} is invalid: InvertedPendulum-v5 takes no keyword "
        "argument 'nonexistent_kw'",
    ),
    (
        "resume of the run's config.yaml",
        lambda w: [*_train(w), f"resume={w / 'pendulum' / 'config.yaml'}"],
        "error: resume='{w}/pendulum/config.yaml' is invalid: it is a file of the run folder {w}/pendulum, "
        "not a checkpoint; pass the run folder (resume={w}/pendulum",
    ),
    (
        "a Dict observation space",
        lambda w: [*_train(w, "gym"), "task.env_id=DictObs-v0", "task.env_import=dict_obs_env"],
        "error: task.env_id='DictObs-v0' is invalid: its observation space is Dict('goal', 'position'); ",
    ),
    (
        "an empty run_name",
        lambda w: [*_train(w), "run_name="],
        "error: run_name='' is invalid: it is empty",
    ),
    (
        "an empty run_name for a seed list",
        lambda w: [*_train(w), "seed=1,2", "run_name="],
        "error: run_name='' is invalid: it is empty",
    ),
    (
        "a key added with + that is no setting",
        lambda w: [*_train(w), "+algo.agent.foo=1"],
        "error: algo.agent.foo is not a setting; the nearest known: ",
    ),
    # Item 4: what does not fit this host is refused before anything starts (sizes beyond any host).
    (
        "a replay buffer larger than the host's memory",
        lambda w: [*_train(w), "algo.agent.buffer_size=500000000000"],
        "error: algo.agent.buffer_size=500000000000 is invalid: host memory cannot hold the replay buffer "
        "(500000000000 steps x 2 envs, ",
    ),
    (
        "more envs than the host's memory holds, async",
        lambda w: [*_train(w), "algo.trainer.asynchronous=true", "task.num_envs=2000000000"],
        "error: task.num_envs=2000000000 is invalid: host memory cannot hold the replay buffer (",
    ),
    (
        "rings larger than the host's memory",
        lambda w: [
            *_train(w),
            "algo.trainer.asynchronous=true",
            "algo.trainer.async_options.ring_capacity=100000000000",
        ],
        "error: algo.trainer.async_options.ring_capacity=100000000000 is invalid: host memory cannot hold "
        "the replay buffer (",
    ),
    # Item 6: a mistyped command.
    (
        "a mistyped command",
        lambda w: ["evaluate", f"checkpoint={w / 'pendulum'}"],
        "error: 'evaluate' is not a command; did you mean `trainer eval`?",
    ),
]


@pytest.mark.parametrize(
    ("args", "expected"), [row[1:] for row in BAD_INPUTS], ids=[row[0] for row in BAD_INPUTS]
)
def test_a_bad_input_is_one_line_naming_the_setting_and_creates_nothing(
    world: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: Callable[[Path], list[str]],
    expected: str,
) -> None:
    """The input exits 2 with one stderr line that names the setting at fault; no file or folder appears."""
    monkeypatch.chdir(world)
    monkeypatch.syspath_prepend(str(world / "mods"))
    argv = args(world)
    before = sorted(world.rglob("*"))
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(expected.replace("{w}", str(world))), err
    assert "None" not in err, err
    assert sorted(world.rglob("*")) == before, "the input created files"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help_with_its_options_and_an_example(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`trainer <command> --help` (-h, `trainer help <command>`) exits 0 listing every option and examples."""
    for args in ([name, "--help"], [name, "checkpoint=x", "-h"], ["help", name]):
        with pytest.raises(SystemExit) as info:
            main(args)
        assert info.value.code == 0
        out = capsys.readouterr().out
        assert out == command_help(name)
    command = COMMANDS[name]
    assert out.startswith(f"usage: trainer {name} ")
    for option in command.options:
        assert f"  {option.key}={option.value} " in out
    assert "examples:\n  trainer " + name in out


def test_the_main_help_names_every_command_and_the_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """`trainer --help` lists each command and how to get its help; `--version` prints the version."""
    from importlib.metadata import version

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert f"       trainer {name} " in out
    assert "trainer COMMAND --help" in out and "trainer --version" in out
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"trainer (fastsac-trainer) {version('fastsac-trainer')}\n"


QUICK_PATHS = (
    ["--help"],
    ["--version"],
    ["eval", "--help"],
    ["export", "--help"],
    ["plot", "--help"],
    ["evaluate"],
)
HEAVY = ("torch", "hydra", "gymnasium", "mujoco", "rich", "matplotlib", "fastsac_async")


def test_help_and_mistakes_at_the_first_word_import_nothing_heavy() -> None:
    """In a fresh interpreter, help, version and a mistyped command load none of torch, hydra, gymnasium..."""
    script = (
        "import sys\n"
        "from fastsac_trainer.cli import main\n"
        f"for args in {QUICK_PATHS!r}:\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]", result.stdout[-2000:]


_FORK_SERVER_PROBE = """
import sys
import fastsac_async.parent.fork_server as fork_server
class Started(Exception):
    pass
def probe(preload=(), **options):
    raise Started("torch" in sys.modules)
fork_server.start_fork_server = probe
if __name__ == "__main__":
    from fastsac_trainer.cli import main
    from fastsac_trainer.api import train
    for start in (lambda: main(["task=pendulum"]), lambda: train("pendulum")):
        try:
            start()
        except Started as started:
            print("torch first:", started.args[0])
"""


def test_a_training_run_starts_its_fork_server_before_anything_imports_torch() -> None:
    """From the command line and from train(), the workers' fork server starts before torch is imported."""
    result = subprocess.run(
        [sys.executable, "-c", _FORK_SERVER_PROBE], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-2:] == ["torch first: False", "torch first: False"], result.stdout


_PRELOADED_PROBE = """
import sys
import multiprocessing as mp
from pathlib import Path

GL = ("libEGL", "libGL.", "libGLX", "libOpenGL", "OSMesa", "libX11")

def report(queue):
    maps = Path("/proc/self/maps").read_text()
    queue.put((
        "fastsac_trainer.tasks._factory" in sys.modules and "mujoco" in sys.modules,
        [lib for lib in GL if lib in maps] + [m for m in sys.modules if m.startswith("OpenGL")][:1],
        "torch" in sys.modules and "torch._dynamo" in sys.modules,
    ))

if __name__ == "__main__":
    from fastsac_trainer.training import end_start, start_workers_first
    server = start_workers_first()
    worker = None
    try:
        context = mp.get_context("forkserver")
        queue = context.Queue()
        worker = context.Process(target=report, args=(queue,))
        worker.start()
        preloaded, gl, dynamo = queue.get(timeout=60)
        worker.join(60)
        print("exit code:", worker.exitcode)
        print("GL loaded:", gl)
        print("torch and dynamo:", dynamo)
        print("preloaded:", preloaded)
    finally:
        if worker is not None and worker.is_alive():
            worker.kill()
        end_start(server)
"""


def _probe_preloaded(tmp_path: Path, gl: str | None, *, dynamo: str = "") -> list[str]:
    """The last lines of ``_PRELOADED_PROBE`` with ``MUJOCO_GL=gl`` (None: unset) and the dynamo variable."""
    script = tmp_path / "probe.py"
    script.write_text(_PRELOADED_PROBE)
    skip = ("MUJOCO_GL", "PYOPENGL_PLATFORM", PRELOAD_DYNAMO_ENV)
    env = {k: v for k, v in os.environ.items() if k not in skip} | {PRELOAD_DYNAMO_ENV: dynamo}
    result = subprocess.run(
        [sys.executable, str(script)], env=env if gl is None else dict(env, MUJOCO_GL=gl),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()[-4:]


@pytest.mark.parametrize(
    ("gl", "asked", "preloaded"), [(None, "", True), ("egl", "", False), (None, "0", True)]
)
def test_a_forked_worker_finds_the_tasks_imported_by_its_server(
    tmp_path: Path, gl: str | None, asked: str, preloaded: bool
) -> None:
    """The trainer's server imports torch and the tasks, no GL unless MUJOCO_GL asks, dynamo unless told."""
    dynamo = asked != "0"
    expected = ["exit code: 0", "GL loaded: []", f"torch and dynamo: {dynamo}", f"preloaded: {preloaded}"]
    assert _probe_preloaded(tmp_path, gl, dynamo=asked) == expected


def test_the_dynamo_preload_is_on_unless_the_variable_says_0() -> None:
    """FASTSAC_PRELOAD_DYNAMO: unset, empty or 1 preloads dynamo in the fork server, 0 not; else one error."""
    from fastsac_trainer.training import server_preloads_dynamo

    assert server_preloads_dynamo({}) and server_preloads_dynamo({PRELOAD_DYNAMO_ENV: ""})
    assert server_preloads_dynamo({PRELOAD_DYNAMO_ENV: "1"})
    assert not server_preloads_dynamo({PRELOAD_DYNAMO_ENV: "0"})
    with pytest.raises(ConfigError) as info:
        server_preloads_dynamo({PRELOAD_DYNAMO_ENV: "yes"})
    assert str(info.value) == (
        "FASTSAC_PRELOAD_DYNAMO='yes' is invalid: unset it, or use 1 (the fork server imports dynamo, the "
        "default) or 0 (each learner does)"
    )


def test_the_fork_server_imports_mujoco_only_under_a_mujoco_gl_that_loads_no_opengl() -> None:
    """Unset, GLFW or disabled: MuJoCo may be imported before forking; EGL, OSMesa or a typo: not."""
    from fastsac_trainer.rendering import mujoco_import_is_fork_safe

    for value in ("", " GLFW ", "disable", "off", "0"):
        assert mujoco_import_is_fork_safe({"MUJOCO_GL": value}), value
    assert mujoco_import_is_fork_safe({})
    for value in ("egl", "osmesa", "EGL", "glfx", "wgl"):
        assert not mujoco_import_is_fork_safe({"MUJOCO_GL": value}), value


def test_the_read_only_runs_root_of_the_table_refuses_a_folder(world: Path) -> None:
    """Nothing can be created in the table's read-only runs_root (else that row would prove nothing)."""
    with pytest.raises(OSError):
        Path(_read_only_folder(world)).mkdir(parents=True)


@pytest.mark.parametrize(
    "package", ["fastsac_trainer.config", "fastsac_trainer.console", "fastsac_trainer.tasks"]
)
def test_each_lazy_package_loads_every_name_it_exports(package: str) -> None:
    """A package whose names load on first use has a home for exactly its ``__all__``, and each one loads."""
    import importlib

    module = importlib.import_module(package)
    assert set(module._HOME_OF) == set(module.__all__)
    assert set(module.__all__) <= set(dir(module)), "dir() and completion list the names not loaded yet"
    for name in module.__all__:
        assert getattr(module, name) is getattr(importlib.import_module(module._HOME_OF[name]), name)


@pytest.mark.gpu
def test_a_replay_buffer_larger_than_the_gpu_is_refused_naming_the_gpu(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CUDA learner's replay is checked against its GPU's free memory: one line, exit 2, nothing created."""
    before = sorted(world.rglob("*"))
    with pytest.raises(SystemExit) as info:
        main([*_train(world), "algo.trainer.device=cuda", "algo.agent.buffer_size=500000000000"])
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert err.startswith(
        "error: algo.agent.buffer_size=500000000000 is invalid: cuda:0 memory cannot hold the replay buffer"
    ), err
    assert sorted(world.rglob("*")) == before


def test_without_a_gpu_its_free_memory_is_unknown_not_an_error() -> None:
    """No GPU (or no NVML): gpu_free_bytes says None, so the memory check skips the GPU, no traceback."""
    import torch

    from fastsac_trainer.config.memory import gpu_free_bytes

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the gpu test below checks its figure")
    assert gpu_free_bytes("cuda:0") is None and gpu_free_bytes("cuda") is None


_GPU_FREE = """
import torch
from fastsac_trainer.config.memory import gpu_free_bytes

nvml = gpu_free_bytes("cuda:0")
print("context", torch.cuda.is_initialized())
free, _ = torch.cuda.mem_get_info(0)
print("free", nvml, free)
"""


@pytest.mark.gpu
def test_the_gpu_memory_check_asks_nvml_and_creates_no_cuda_context() -> None:
    """gpu_free_bytes creates no CUDA context, and agrees with CUDA's own free memory within 2 GiB."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _GPU_FREE], capture_output=True, text=True, timeout=120,
                          check=True)  # fmt: skip
    assert "context False" in done.stdout, done.stdout + done.stderr
    nvml, cuda = (int(v) for v in done.stdout.split("free ")[1].split())
    assert 0 <= nvml - cuda < 2**31, "NVML's figure is taken before the context CUDA's own query creates"


@pytest.mark.slow
def test_a_worker_failing_while_training_is_named_with_its_exception(world: Path) -> None:
    """An env raising on its 31st step: the last line names the env, the exception and the line raising it.

    It says worker (not boot) failed, and where the traceback is; no traceback on the console. The real
    async trainer, as a user runs it (a subprocess, its workers forked), at its smallest.
    """
    from shm_transport import list_segments

    args = [
        *_train(world, "gym"),
        "task.env_factory=failing_env:make",
        "task.env_kwargs={fail_at_step:31}",
        "algo.trainer.asynchronous=true",
        "algo.trainer.num_learning_iterations=1000",  # never reached: the env fails first
        "algo.trainer.eval_interval_s=null",
        "algo.trainer.logging_interval=1000",  # no report before the failure: only the engine knows
        "algo.agent.learning_starts=2",
        "algo.agent.batch_size=32",
        "algo.agent.num_updates=1",
        "algo.agent.actor_hidden_dim=16",
        "algo.agent.critic_hidden_dim=16",
        "run_name=fails",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(world / "mods"))
    with subprocess.Popen(
        [sys.executable, "-m", "fastsac_trainer", *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as proc:  # fmt: skip
        try:
            out, err = proc.communicate(timeout=300)
        finally:
            proc.kill()
    assert proc.returncode == 1, out + err
    last = err.splitlines()[-1]
    named = (  # the env, its exception and the line that raised it, as the synchronous trainer says it
        r"error: worker failed: collector0: _FailingEnv's step\(\) raised RuntimeError: env exploded at "
        r"step 31 \(raised at testing\.py:\d+ in step\) \(exited with code 1\); traceback in \S+"
        r"collector0_error\.log; its log is "
    )
    assert re.match(named, last) and "Traceback" not in err, last
    assert "boot failed" not in out + err
    assert not [s for s in list_segments() if s.creator_pid == proc.pid], "the run left segments in /dev/shm"
