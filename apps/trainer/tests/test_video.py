"""Videos of the deterministic policy, rendered offscreen (EGL or OSMesa).

``trainer eval video=true``, and the clips of evaluations during training (``eval_video_every``).
"""

from __future__ import annotations

import io
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fastsac_async.run_layout import RunLayout
from fastsac_core import save_checkpoint
from fastsac_core.testing import make_agent
from fastsac_trainer.rendering import BACKENDS, RenderingError, _probe, select_gl
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
    RunLayout(folder).config.write_text(
        f"task:\n  name: halfcheetah\n  env_id: {spec.env_id}\n  max_episode_steps: null\n"
    )
    save_checkpoint(RunLayout(folder).checkpoint(3), agent, extra={"iteration": 3})
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
    out = RunLayout(cheetah_run).video("model_0000003")
    assert f"video: {out} (25 frames, " in done.stdout
    frames = _decode(out)
    assert frames.shape == (25, 480, 480, 3)
    assert frames.std() > 1, "frames are not blank"
    changes = [np.abs(a.astype(int) - b.astype(int)).mean() for a, b in itertools.pairwise(frames)]
    assert min(changes) > 0, "every frame differs from the one before"


@pytest.mark.slow
def test_eval_video_out_gif_writes_a_gif(backend: str, cheetah_run: Path, tmp_path: Path) -> None:
    """video_out=<file>.gif: a looping GIF (Pillow alone) of 25 changing 480x480 frames, no MP4 written."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("MUJOCO_GL", None)
    out = tmp_path / "cheetah.gif"
    command = [sys.executable, str(APP_DIR), "eval", f"checkpoint={cheetah_run}", "episodes=1", "video=true",
               "video_steps=24", f"video_out={out}"]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"video: {out} (25 frames, " in done.stdout
    frames = _gif_frames(out.read_bytes())
    assert len(frames) == 25 and frames[0].shape == (480, 480, 3)
    assert min(np.abs(a.astype(int) - b.astype(int)).mean() for a, b in itertools.pairwise(frames)) > 0
    with Image.open(out) as gif:
        assert gif.info.get("loop") == 0, "it loops"
    assert list(tmp_path.iterdir()) == [out], "nothing else, no partial file"


def test_an_ffmpeg_that_is_not_there_means_no_mp4(monkeypatch: pytest.MonkeyPatch) -> None:
    """IMAGEIO_FFMPEG_EXE naming no file: MP4s are unavailable (clips fall back to GIFs), with the path."""
    from fastsac_trainer.video import mp4_unavailable

    assert mp4_unavailable() is None, "this machine has imageio-ffmpeg and its binary"
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", "/nonexistent/ffmpeg")
    assert "not at /nonexistent/ffmpeg" in (mp4_unavailable() or "")


_WITHOUT_FFMPEG = """
import sys
from pathlib import Path

sys.modules["imageio_ffmpeg"] = None  # as in an install without it (the GPU host's): its import fails
from fastsac_trainer.rendering import select_gl

select_gl()
from fastsac_trainer.cli import main
from fastsac_trainer.evaluate import load_policy
from fastsac_trainer.tasks import get_task
from fastsac_trainer.video import EvalClips

checkpoint, out = Path(sys.argv[1]), Path(sys.argv[2])
policy, _ = load_policy(checkpoint)
clips = EvalClips(get_task("halfcheetah").env_factory(), steps=4)
print("clip written", clips(policy, 0, out, lambda: False))
sys.argv = ["trainer", "eval", f"checkpoint={checkpoint}", "episodes=1", "video=true", "video_steps=4"]
main()
"""


@pytest.mark.slow
def test_without_imageio_ffmpeg_clips_are_gifs_and_an_mp4_is_refused(
    backend: str, cheetah_run: Path, tmp_path: Path
) -> None:
    """No imageio-ffmpeg: a clip of an evaluation is its GIF alone; trainer eval's MP4 is one line, exit 2."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("MUJOCO_GL", None)
    checkpoint = RunLayout(cheetah_run).checkpoint(3)
    out = tmp_path / "videos" / "eval_7.mp4"
    videos = RunLayout(cheetah_run).videos  # shared with the tests above: compare before and after
    before = {f: f.stat().st_mtime_ns for f in videos.glob("*")} if videos.is_dir() else {}
    done = subprocess.run([sys.executable, "-c", _WITHOUT_FFMPEG, str(checkpoint), str(out)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert f"clip written {out.with_suffix('.gif')}" in done.stdout, done.stdout + done.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["eval_7.gif"], "the GIF alone, no partial MP4"
    assert len(_gif_frames(out.with_suffix(".gif").read_bytes())) == 5
    assert done.returncode == 2, done.stdout + done.stderr
    (error,) = done.stderr.strip().splitlines()
    assert "imageio-ffmpeg" in error and "video_out=" in error and ".gif" in error, error
    after = {f: f.stat().st_mtime_ns for f in videos.glob("*")} if videos.is_dir() else {}
    assert after == before, "trainer eval wrote nothing"


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


CLIP_RUN = [
    "task=halfcheetah",  # its episodes never end early: every clip has its full frame count
    "task.num_envs=2",
    "task.max_episode_steps=40",
    "algo.trainer.num_learning_iterations=160",
    "algo.trainer.logging_interval=10",
    "algo.trainer.save_interval=1000",
    "algo.agent.learning_starts=10",
    "algo.agent.batch_size=32",
    "algo.agent.num_updates=1",
    "algo.trainer.eval_interval_s=null",
    "algo.trainer.eval_interval=40",
    "algo.trainer.eval_episodes=1",
    "algo.trainer.eval_video_every=2",
    "algo.trainer.eval_video_steps=12",
    "console=plain",
    "runs_root=runs",
    "run_name=clips",
]


def _gif_frames(encoded: bytes) -> list[np.ndarray]:
    with Image.open(io.BytesIO(encoded)) as gif:
        frames = []
        for index in range(gif.n_frames):
            gif.seek(index)
            frames.append(np.asarray(gif.convert("RGB")))
        return frames


def _check_clips(run_dir: Path, stdout: str) -> list[int]:
    """The global steps of the clips in videos/, each checked: 13 changing 256x256 frames, its GIF in TB."""
    clips = sorted(RunLayout(run_dir).videos.glob("eval_*.mp4"))
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    eval_steps = [int(e.step) for e in events.Scalars("eval/return")]
    images = {int(e.step): e for e in events.Images("eval/video")}
    gsteps = [int(c.stem.removeprefix("eval_")) for c in clips]
    assert sorted(images) == [2 * g for g in gsteps], "one TensorBoard clip per file, at its env steps"
    assert set(images) <= set(eval_steps), "clips are of evaluated weights"
    for clip, gstep in zip(clips, gsteps, strict=True):
        frames = _decode(clip)
        assert frames.shape == (13, 256, 256, 3), "the reset state, then one frame per step"
        changes = [np.abs(a.astype(int) - b.astype(int)).mean() for a, b in itertools.pairwise(frames)]
        assert min(changes) > 0, "every frame differs from the one before"
        gif = clip.with_suffix(".gif").read_bytes()
        assert images[2 * gstep].encoded_image_string == gif
        assert (images[2 * gstep].width, images[2 * gstep].height) == (256, 256)
        shown = _gif_frames(gif)
        assert len(shown) == 13 and np.abs(shown[0].astype(int) - frames[0].astype(int)).mean() < 8
        assert f"clip runs/clips/videos/{clip.name}" in stdout, "the console names the clip"
    assert not list(RunLayout(run_dir).videos.glob(".*")), "no partial file is left"
    return gsteps


def _train(args: list[str], cwd: Path) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("MUJOCO_GL", None)  # chosen by the command
    command = [sys.executable, str(APP_DIR), *args]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=400, check=False)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
def test_async_training_records_a_clip_of_every_other_evaluation(backend: str, tmp_path: Path) -> None:
    """Async, eval_video_every=2: the 1st evaluation leaves an MP4, a GIF and a TB clip; the 2nd none."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("MUJOCO_GL", None)  # chosen by the command
    endless = (
        "algo.trainer.num_learning_iterations=1000000"  # the niced evaluator sets the pace, not a budget
    )
    command = [
        sys.executable,
        str(APP_DIR),
        *CLIP_RUN,
        endless,
        "algo.trainer.async_options.num_collectors=1",
    ]
    run_dir = tmp_path / "runs" / "clips"
    log = RunLayout(run_dir).log("evaluator")
    with (tmp_path / "stdout.txt").open("w+") as out:
        proc = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, text=True
        )
        try:
            deadline = time.monotonic() + 300
            while not (log.is_file() and log.read_text().count("EvalReport(") >= 2):
                assert proc.poll() is None and time.monotonic() < deadline, "two evaluations within 300 s"
                time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=120) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        out.seek(0)
        stdout = out.read()
    finished = [int(g) for g in re.findall(r"EvalReport\(global_step=(\d+),", log.read_text())]
    gsteps = _check_clips(run_dir, stdout)
    assert gsteps[:1] == finished[:1] and finished[1] not in gsteps, (finished, gsteps)


@pytest.mark.slow
def test_sync_training_records_clips_of_the_same_cadence(backend: str, tmp_path: Path) -> None:
    """Sync (rendered in the trainer's process), eval_video_every=2: clips at iterations 40 and 120 of 160."""
    stdout = _train([*CLIP_RUN, "algo.trainer.asynchronous=false"], tmp_path)
    assert f"clips of evaluations: every 2, rendered with MUJOCO_GL={backend}" in stdout
    assert _check_clips(tmp_path / "runs" / "clips", stdout) == [40, 120]


_RENDERER_AFTER_IMPORT = """
import os
import mujoco  # under MUJOCO_GL unset: GLFW's context, as a fork server or a parent imports it
os.environ.update(MUJOCO_GL={backend!r}, PYOPENGL_PLATFORM={backend!r})  # chosen later (select_gl)
from fastsac_trainer.rendering import match_mujoco_gl
match_mujoco_gl()
model = mujoco.MjModel.from_xml_string("<mujoco><worldbody><geom size='1'/></worldbody></mujoco>")
renderer = mujoco.Renderer(model, 16, 16)
renderer.update_scene(mujoco.MjData(model))
print(mujoco.GLContext.__module__, renderer.render().shape)
renderer.close()
"""


def test_mujocos_own_renderer_follows_a_backend_chosen_after_mujoco_was_imported(backend: str) -> None:
    """mujoco.Renderer renders offscreen with the backend chosen after the import (no display needed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY")}
    done = subprocess.run(
        [sys.executable, "-c", _RENDERER_AFTER_IMPORT.format(backend=backend)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"mujoco.{backend}", "(16,", "16,", "3)"], done.stdout
