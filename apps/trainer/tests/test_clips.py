"""Clips you can watch: the camera follows the body, and a clip that fails in training is said once.

The task chooses the camera (the locomotion models' tracking camera), the user may name another.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import gymnasium as gym
import numpy as np
import pytest
from PIL import Image, ImageSequence

from fastsac_async import EvalReport
from fastsac_trainer.async_trainer import eval_point
from fastsac_trainer.config.compose import compose_config
from fastsac_trainer.config.exceptions import TrainerAppError
from fastsac_trainer.rendering import BACKENDS, _probe
from fastsac_trainer.tasks import MujocoEnvFactory, env_factory_for
from fastsac_trainer.video import CLIP_SIZE, check_video

APP_DIR = Path(__file__).resolve().parents[1]


def _camera(task: str, *overrides: str) -> str | None:
    """The clips' camera of ``task=<task>`` with ``overrides``, as a run resolves it from its config."""
    cfg = compose_config([f"task={task}", *overrides])
    factory = env_factory_for(dict(cfg.task))
    assert isinstance(factory, MujocoEnvFactory)
    return factory.video_camera


def test_locomotion_clips_follow_the_body_unless_the_user_names_another_camera() -> None:
    """Locomotion tasks film with their model's tracking camera; task.video_camera=... or null wins."""
    assert [_camera(t) for t in ("humanoid", "ant", "halfcheetah", "hopper", "walker2d")] == ["track"] * 5
    assert _camera("pendulum") is None, "InvertedPendulum has no tracking camera: gymnasium's view"
    assert _camera("ant", "task.video_camera=null") is None
    assert _camera("gym", "task.env_id=Swimmer-v5", "task.video_camera=track") == "track"
    old_run = {"name": "ant", "env_id": "Ant-v5", "max_episode_steps": None}  # saved before the setting
    assert getattr(env_factory_for(old_run), "video_camera", None) == "track"


def test_a_camera_the_env_lacks_is_one_line_naming_its_cameras() -> None:
    """check_video refuses a camera name Ant-v5 lacks in one line that names the setting and 'track'."""
    check_video(MujocoEnvFactory(env_id="Ant-v5", video_camera="track"), CLIP_SIZE)
    with pytest.raises(TrainerAppError) as caught:
        check_video(MujocoEnvFactory(env_id="Ant-v5", video_camera="top"), CLIP_SIZE)
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith("task.video_camera='top' is invalid: Ant-v5 has no camera of that name")
    assert "'track'" in line and "task.video_camera=null" in line


class _Still(gym.Env[np.ndarray, np.ndarray]):
    """A one-number env that renders a grey frame of its own size, if it takes a render mode at all."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    metadata: ClassVar[dict[str, object]] = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode

    def render(self) -> np.ndarray:
        return np.full((8, 8, 3), 128, np.uint8)


class _Blind(_Still):
    """The same env without a render_mode keyword: it cannot be asked for frames."""

    def __init__(self) -> None:
        super().__init__()


def test_an_env_without_mujocos_frame_size_renders_and_one_without_render_mode_is_one_line() -> None:
    """check_video makes an env that takes render_mode but no width/height; one taking neither is refused."""
    for name, entry in (("StillQA-v0", _Still), ("BlindQA-v0", _Blind)):
        if name not in gym.registry:
            gym.register(name, entry_point=entry, max_episode_steps=5)
    check_video(MujocoEnvFactory(env_id="StillQA-v0"), CLIP_SIZE)
    with pytest.raises(TrainerAppError) as caught:
        check_video(MujocoEnvFactory(env_id="BlindQA-v0"), CLIP_SIZE)
    line = str(caught.value)
    assert "\n" not in line and line.startswith("video=true is invalid for BlindQA-v0: it cannot be made to")
    assert "render_mode" in line


def test_the_async_trainers_evaluation_record_keeps_a_failed_clips_reason() -> None:
    """eval_point keeps the evaluator's reason (the async path to the console's EvalLog)."""
    report = EvalReport(global_step=3, weight_version=1, mean_return=1.0, mean_length=2.0, episodes=1,
                        seconds=0.1, best=True, best_return=1.0,
                        video_error="RuntimeError: no EGL")  # fmt: skip
    assert eval_point(report, 4).video_error == "RuntimeError: no EGL"


@pytest.mark.slow
def test_a_run_whose_clips_fail_says_so_once_on_the_console(tmp_path: Path) -> None:
    """Three failing clips (MUJOCO_GL=disable: no OpenGL): one console line, the traceback in the log only."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MUJOCO_GL="disable")  # kept as the user's: rendering fails
    command = [sys.executable, str(APP_DIR), "task=pendulum", "algo.trainer.asynchronous=false",
               "algo.trainer.num_learning_iterations=30", "algo.agent.learning_starts=5",
               "algo.trainer.eval_interval_s=null", "algo.trainer.eval_interval=10",
               "algo.trainer.eval_episodes=1",
               "algo.trainer.eval_video_every=1", "algo.trainer.eval_video_steps=5", "console=plain",
               "runs_root=runs", "run_name=clips"]  # fmt: skip
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in done.stdout.splitlines() if "no clip of the evaluation" in line]
    assert len(said) == 1, done.stdout
    assert "MUJOCO_GL" in said[0] and "training goes on" in said[0], said[0]
    assert said[0].endswith("traceback in runs/clips/logs/trainer.log"), said[0]
    assert done.stdout.count("eval @ ") == 3, "three evaluations, each wanting a clip"
    assert "Traceback" not in done.stdout and "EvalReport(" not in done.stdout, done.stdout
    assert done.stdout.count("start-up: first update") == 1, "one milestone: no summary repeating it"
    log = (tmp_path / "runs" / "clips" / "logs" / "trainer.log").read_text()
    assert log.count("Traceback") >= 1 and log.count("EvalReport(") == 3, (
        "the evaluator's records are the log's"
    )


def _backend() -> str | None:
    return next((b for b in BACKENDS if _probe(b) is None), None)


def _ant_pixels(frame: np.ndarray) -> np.ndarray:
    """Where the Ant is: its geoms' orange (rgba 0.8 0.6 0.4) against the grey floor and the sky."""
    r, g, b = (frame[..., i].astype(int) for i in range(3))
    return (r > b + 40) & (g > b + 10)


_ANT_CLIP = """
import sys, torch
from fastsac_core import FastSACConfig, InferencePolicy
from fastsac_trainer.tasks import MujocoEnvFactory, probe_dims
from fastsac_trainer.video import record_video
factory = MujocoEnvFactory(env_id="Ant-v5", keep_wrappers=True, video_camera=sys.argv[2] or None,
                           env_kwargs={"reset_noise_scale": 2.0, "terminate_when_unhealthy": False})
cfg = FastSACConfig(actor_hidden_dim=16, critic_hidden_dim=16, num_atoms=11, compile=False, cudagraphs=False)
torch.manual_seed(0)
policy = InferencePolicy(probe_dims(factory), cfg, deterministic=True)
out = __import__("pathlib").Path(sys.argv[1])
record_video(policy, factory, out, seed=0, max_steps=40, width=128, height=128)
"""


@pytest.mark.slow
def test_an_ant_clip_keeps_the_body_near_the_frame_centre(tmp_path: Path) -> None:
    """An Ant thrown ~20 m (reset noise 2) stays near the centre of all 41 frames of its GIF (real MuJoCo)."""
    backend = _backend()
    if backend is None:
        pytest.skip("no offscreen OpenGL here (neither EGL nor OSMesa): run it on the GPU host (EGL)")
    out = tmp_path / "ant.gif"
    env = dict(os.environ, OMP_NUM_THREADS="1", MUJOCO_GL=backend, PYOPENGL_PLATFORM=backend)
    done = subprocess.run([sys.executable, "-c", _ANT_CLIP, str(out), "track"], env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    with Image.open(out) as gif:
        frames = [np.asarray(frame.convert("RGB")) for frame in ImageSequence.Iterator(gif)]
    assert len(frames) == 41, "the reset state and 40 steps"
    for index, frame in enumerate(frames):
        ys, xs = np.nonzero(_ant_pixels(frame))
        assert len(xs) > 200, f"frame {index}: the Ant is in view"
        assert abs(xs.mean() - 64) < 32 and abs(ys.mean() - 64) < 32, f"frame {index}: near the centre"
