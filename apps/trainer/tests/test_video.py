"""``trainer eval video=true``: an MP4 of the deterministic policy, rendered offscreen (EGL or OSMesa)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fastsac_core import save_checkpoint
from fastsac_core.testing import make_agent
from fastsac_trainer.rendering import BACKENDS, RenderingError, _probe, select_gl
from fastsac_trainer.run_dir import CONFIG_FILE
from fastsac_trainer.tasks import get_task, probe_dims

APP_DIR = Path(__file__).resolve().parents[1]


def _decode(path: Path) -> np.ndarray:
    """Every frame of the video at ``path``, decoded by imageio's ffmpeg in a child process.

    imageio's ffmpeg reader leaves its pipes to the garbage collector (a ResourceWarning, an error
    here); the child's exit closes them.
    """
    frames = path.with_suffix(".npy")
    code = (
        "import sys, numpy, imageio.v3 as iio; "
        "numpy.save(sys.argv[2], iio.imread(sys.argv[1], plugin='FFMPEG'))"
    )
    subprocess.run([sys.executable, "-c", code, str(path), str(frames)], check=True, timeout=120)
    return np.load(frames)


def _renderer() -> str | None:
    return next((b for b in BACKENDS if _probe(b) is None), None)


@pytest.fixture(scope="module")
def backend() -> str:
    found = _renderer()
    if found is None:
        pytest.skip("no offscreen OpenGL here (neither EGL nor OSMesa): run it on the GPU host (EGL)")
    return found


@pytest.fixture(scope="module")
def cheetah_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder with a HalfCheetah checkpoint (its episodes never end early) whose actor moves."""
    spec = get_task("halfcheetah")
    dims = probe_dims(spec.env_factory())
    agent = make_agent(dims, spec.agent_config(), "cpu", num_envs=1)
    with torch.no_grad():
        for param in agent.model.actor.parameters():
            param.add_(0.5 * torch.randn(param.shape, generator=torch.Generator().manual_seed(0)))
    folder = tmp_path_factory.mktemp("run")
    (folder / CONFIG_FILE).write_text(
        f"task:\n  name: halfcheetah\n  env_id: {spec.env_id}\n  max_episode_steps: null\n"
    )
    save_checkpoint(folder / "checkpoints" / "model_0000003.pt", agent, extra={"iteration": 3})
    return folder


@pytest.mark.slow
def test_eval_video_decodes_with_the_expected_frames(backend: str, cheetah_run: Path) -> None:
    """The MP4 decodes to video_steps + 1 frames (reset, then one per step) of 480x480, and they change."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("MUJOCO_GL", None)  # chosen by the command
    command = [sys.executable, str(APP_DIR), "eval", f"checkpoint={cheetah_run}", "episodes=1", "video=true",
               "video_steps=24"]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out = cheetah_run / "videos" / "model_0000003.mp4"
    assert f"video: {out} (25 frames, " in done.stdout
    frames = _decode(out)
    assert frames.shape == (25, 480, 480, 3)
    assert frames.std() > 1, "frames are not blank"
    changes = [np.abs(a.astype(int) - b.astype(int)).mean() for a, b in itertools.pairwise(frames)]
    assert min(changes) > 0, "every frame differs from the one before"


def test_no_backend_is_one_line_naming_the_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every backend failing, select_gl raises one line naming EGL and OSMesa packages."""
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.setattr(sys, "executable", "/bin/false")  # every probe child fails
    with pytest.raises(RenderingError) as caught:
        select_gl()
    line = str(caught.value)
    assert "\n" not in line and "egl: exit code 1; osmesa: exit code 1" in line
    assert "libegl1" in line and "libosmesa6" in line
    assert "MUJOCO_GL" not in os.environ


def test_a_mujoco_gl_set_by_the_user_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """MUJOCO_GL=osmesa given by the user is what select_gl returns, with no probe."""
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    monkeypatch.setattr(sys, "executable", "/bin/false")
    assert select_gl() == "osmesa"
