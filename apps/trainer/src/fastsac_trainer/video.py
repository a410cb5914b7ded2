"""Videos of the deterministic policy: ``trainer eval ... video=true`` and the clips of evaluations.

One episode of the run's env (reset with the eval seed), rendered offscreen by MuJoCo
(``MUJOCO_GL`` from :func:`fastsac_trainer.rendering.select_gl`) and encoded with imageio's ffmpeg (H.264).
Frames: the reset state, then one per step until the episode ends or ``max_steps`` steps. A file
appears whole or not at all (written beside, then renamed). The camera is the factory's
``video_camera`` (``task.video_camera``: the locomotion tasks' ``track`` camera follows the body); a
name the env's model lacks, or an env that cannot render, is refused in one line before anything is
evaluated (:func:`check_video`).

:class:`EvalClips` is the clip recorder of evaluations during training
(``algo.trainer.eval_video_every``): the MP4, and beside it a GIF of the same clip (at most
:data:`GIF_MAX_FRAMES` frames, played at the episode's speed), which TensorBoard shows.

MP4 needs imageio-ffmpeg (a dependency of the trainer, but an install can lack it: its wheel is large).
Without it (:func:`mp4_unavailable`) clips of evaluations are GIFs alone, said once at launch, and
``trainer eval video=true`` asks for ``video_out=<name>.gif`` before rendering anything.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fastsac_core import InferencePolicy

if TYPE_CHECKING:
    from fastsac_trainer.config.exceptions import TrainerAppError
    from fastsac_trainer.tasks import MujocoEnvFactory

__all__ = [
    "CLIP_SIZE",
    "GIF_MAX_FRAMES",
    "VIDEO_SIZE",
    "EvalClips",
    "VideoInfo",
    "check_video",
    "gif_of",
    "mp4_unavailable",
    "record_video",
]

CLIP_SIZE = 256
"""Width and height, in pixels, of the clips of evaluations (a multiple of 16)."""
VIDEO_SIZE = 480
"""Width and height, in pixels, of ``trainer eval``'s video (a multiple of 16)."""
GIF_MAX_FRAMES = 100
"""Most frames of a clip's GIF: every n-th frame is kept, each shown n times as long."""


@dataclass(frozen=True)
class VideoInfo:
    """What was written."""

    path: Path
    """The video file (MP4, or GIF)."""
    frames: int
    """Frames in it (a GIF keeps at most :data:`GIF_MAX_FRAMES` of the episode's)."""
    fps: int
    """Frames per second (the env's render rate)."""


def mp4_unavailable() -> str | None:
    """Why an MP4 cannot be written in this environment (no imageio-ffmpeg, or no ffmpeg binary), or None."""
    try:
        import imageio_ffmpeg  # type: ignore[import-untyped]  # small: it only locates the ffmpeg binary
    except ImportError:
        return "MP4 needs imageio-ffmpeg, which is not installed here"
    try:
        exe = imageio_ffmpeg.get_ffmpeg_exe()  # IMAGEIO_FFMPEG_EXE as given, else its bundled binary
    except RuntimeError:  # installed without its binary
        return "MP4 needs ffmpeg, which imageio-ffmpeg cannot find"
    if not (os.path.isfile(exe) or shutil.which(exe)):
        return f"MP4 needs ffmpeg, which is not at {exe} (IMAGEIO_FFMPEG_EXE)"
    return None


def record_video(
    policy: InferencePolicy,
    factory: object,
    out: Path,
    *,
    seed: int,
    max_steps: int,
    width: int = VIDEO_SIZE,
    height: int = VIDEO_SIZE,
    should_stop: Callable[[], bool] = lambda: False,
    gif: bool = False,
) -> VideoInfo | None:
    """Render one episode of ``policy`` on the env of ``factory`` into the video ``out``; None if stopped.

    Args:
        policy: The deterministic policy.
        factory: The run's env factory: a :class:`~fastsac_trainer.tasks.MujocoEnvFactory` (its gymnasium
            id, kwargs, time limit and import).
        out: The file to write (its folder is created): an MP4, or with the suffix ``.gif`` a GIF
            (:func:`gif_of`, written with Pillow alone).
        seed: Reset seed of the episode.
        max_steps: Most steps recorded.
        width: Frame width in pixels (a multiple of 16 keeps H.264 from resizing).
        height: Frame height in pixels.
        should_stop: Polled every step; True: nothing is written and None is returned.
        gif: Also write :func:`gif_of` the frames to ``out`` with the suffix ``.gif``; where no MP4
            can be written (:func:`mp4_unavailable`), the GIF alone (the returned path is the GIF's).

    Raises:
        TrainerAppError: The env is not a gymnasium env this can render (a user's ``env_factory``), or
            an MP4 is asked (without ``gif``) where none can be written.
    """
    no_mp4 = _mp4_refusal(out, gif)
    env = _render_env(factory, width, height)
    try:
        obs, _ = env.reset(seed=seed)
        frames = [env.render()]
        for _ in range(max_steps):
            if should_stop():
                return None
            action = policy(torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0))[0].cpu().numpy()
            obs, _, terminated, truncated, _ = env.step(action)
            frames.append(env.render())
            if terminated or truncated:
                break
        fps = int(env.metadata.get("render_fps", 30))
    finally:
        env.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix.lower() == ".gif" or no_mp4 is not None:  # Pillow alone: no ffmpeg needed
        gif_out = out.with_suffix(".gif")
        _write_whole(gif_out, gif_of(frames, fps))
        return VideoInfo(gif_out, len(frames[:: _gif_stride(len(frames))]), fps)
    import imageio.v3 as iio

    if gif:  # first: the GIF needs Pillow alone, so an MP4 that fails does not take it along
        _write_whole(out.with_suffix(".gif"), gif_of(frames, fps))
    partial = out.with_name(f".{out.stem}.partial{out.suffix}")  # the suffix tells ffmpeg the format
    try:
        iio.imwrite(partial, np.stack(frames), plugin="FFMPEG", fps=fps, codec="libx264", macro_block_size=16)
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)  # a failed write (no ffmpeg, a full disk) leaves nothing
    return VideoInfo(out, len(frames), fps)


def _camera_fault(factory: MujocoEnvFactory, env: Any) -> TrainerAppError | None:
    """The one-line error of a ``video_camera`` that ``env`` (made from ``factory``) lacks; None if fine.

    gymnasium renders a camera name its model lacks with its free default view, silently: this says so.
    """
    from fastsac_trainer.config.exceptions import TrainerAppError

    name = factory.video_camera
    if name is None:
        return None
    model = getattr(env.unwrapped, "model", None)
    names = [] if model is None else [model.camera(i).name for i in range(model.ncam) if model.camera(i).name]
    if name in names:
        return None
    have = f"its cameras are {', '.join(map(repr, names))}" if names else "it has no named camera"
    return TrainerAppError(
        f"task.video_camera={name!r} is invalid: {factory.env_id} has no camera of that name ({have}); "
        "name one of its cameras, or task.video_camera=null for gymnasium's default view"
    )


def check_video(factory: object, size: int, out: Path | None = None) -> None:
    """Refuse, before anything is evaluated, a video that ``record_video`` could not make.

    Makes the render env once and closes it (:func:`_render_env`): not a gymnasium id, an env that
    takes no ``render_mode``, a ``video_camera`` its model lacks; and with ``out``, an MP4 where none
    can be written.

    Raises:
        TrainerAppError: One line: what is wrong and the fix.
    """
    if out is not None:
        _mp4_refusal(out, gif=False)
    _render_env(factory, size, size).close()


def _mp4_refusal(out: Path, gif: bool) -> str | None:
    """Why no MP4 can be written to ``out`` (None: it can, or ``out`` is a GIF).

    Raises:
        TrainerAppError: ``out`` is an MP4 that cannot be written and no GIF may stand in (``gif``).
    """
    from fastsac_trainer.config.exceptions import TrainerAppError

    no_mp4 = mp4_unavailable() if out.suffix.lower() != ".gif" else None
    if no_mp4 is not None and not gif:
        raise TrainerAppError(
            f"video_out={out} is invalid: {no_mp4}; install it or use video_out={out.stem}.gif"
        )
    return no_mp4


def _render_env(factory: object, width: int, height: int) -> Any:
    """The env of ``factory`` made to render ``rgb_array`` frames of ``width`` × ``height``, camera checked.

    MuJoCo's envs take the frame size (and ``camera_name``) as keywords of their own; an env that does
    not is made with ``render_mode`` alone, at its own frame size.

    Raises:
        TrainerAppError: The env is not a gymnasium id (a user's ``env_factory``), cannot be made to
            render (one line: gymnasium's error, the fix), or lacks ``task.video_camera``.
    """
    import gymnasium as gym

    from fastsac_trainer.config.exceptions import TrainerAppError
    from fastsac_trainer.rendering import match_mujoco_gl
    from fastsac_trainer.tasks import MujocoEnvFactory, import_env_module
    from fastsac_trainer.tasks._quiet import quiet_mujoco_compiler

    if not isinstance(factory, MujocoEnvFactory):
        raise TrainerAppError(
            f"video=true is invalid for this run: its env comes from {type(factory).__name__}, not a "
            "gymnasium id; record videos of gymnasium tasks (task.env_id), or render your env yourself"
        )
    import_env_module(factory.env_import)
    match_mujoco_gl()  # an env of the user's may render through mujoco.Renderer
    camera: dict[str, Any] = {} if factory.video_camera is None else {"camera_name": factory.video_camera}
    common = {
        "render_mode": "rgb_array",
        "max_episode_steps": factory.max_episode_steps,
        **factory.env_kwargs,
    }
    env: Any = None
    for sized in (True, False):
        try:
            with quiet_mujoco_compiler():
                env = gym.make(
                    factory.env_id,
                    **common,
                    **({"width": width, "height": height, **camera} if sized else {}),
                )
            break
        except Exception as error:  # gymnasium and the env's own code raise many types: one line
            if sized and isinstance(error, TypeError):
                continue  # no frame size of MuJoCo's kind: once more with render_mode alone
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise TrainerAppError(
                f"video=true is invalid for {factory.env_id}: it cannot be made to render rgb_array "
                f"frames ({type(error).__name__}: {first}); record videos of an env that takes "
                "render_mode='rgb_array'"
            ) from None
    fault = _camera_fault(factory, env)
    if fault is not None:
        env.close()
        raise fault
    return env


def _write_whole(path: Path, data: bytes) -> None:
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_bytes(data)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _gif_stride(frames: int) -> int:
    """Every how many frames a GIF keeps one (so that it has at most :data:`GIF_MAX_FRAMES`)."""
    return max(1, -(-frames // GIF_MAX_FRAMES))


def gif_of(frames: list[np.ndarray], fps: int) -> bytes:
    """An endlessly looping GIF of ``frames`` (at most :data:`GIF_MAX_FRAMES`) at ``fps`` real speed."""
    from PIL import Image

    stride = _gif_stride(len(frames))
    kept = [Image.fromarray(frame) for frame in frames[::stride]]
    buffer = io.BytesIO()
    duration_ms = round(1000 * stride / fps)
    kept[0].save(buffer, format="GIF", save_all=True, append_images=kept[1:], duration=duration_ms, loop=0)
    return buffer.getvalue()


@dataclass(frozen=True)
class EvalClips:
    """The clip recorder of evaluations during training (a ``fastsac_async.ClipRecorder``).

    Args:
        factory: The run's env factory (a :class:`~fastsac_trainer.tasks.MujocoEnvFactory`).
        steps: Most steps of a clip (``algo.trainer.eval_video_steps``).
        size: Width and height in pixels.
    """

    factory: object
    steps: int
    size: int = CLIP_SIZE

    def __call__(
        self, policy: InferencePolicy, seed: int, out: Path, should_stop: Callable[[], bool]
    ) -> Path | None:
        """Record one episode into ``out`` (MP4) and its ``.gif``; the file written, or None if stopped.

        The file written is the MP4, or the GIF alone where no MP4 can be written (:func:`mp4_unavailable`).
        """
        info = record_video(
            policy, self.factory, out, seed=seed, max_steps=self.steps, width=self.size, height=self.size,
            should_stop=should_stop, gif=True,
        )  # fmt: skip
        return None if info is None else info.path
