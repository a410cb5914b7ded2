"""An MP4 of the deterministic policy: ``trainer eval checkpoint=<run> video=true``.

One episode of the run's env (reset with the eval seed), rendered offscreen by MuJoCo
(``MUJOCO_GL`` from :func:`fastsac_trainer.rendering.select_gl`) and encoded with imageio's ffmpeg (H.264).
Frames: the reset state, then one per step until the episode ends or ``max_steps`` steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fastsac_core import InferencePolicy

__all__ = ["VideoInfo", "record_video"]


@dataclass(frozen=True)
class VideoInfo:
    """What was written."""

    path: Path
    """The MP4 file."""
    frames: int
    """Frames in it."""
    fps: int
    """Frames per second (the env's render rate)."""


def record_video(
    policy: InferencePolicy,
    factory: object,
    out: Path,
    *,
    seed: int,
    max_steps: int,
    width: int = 480,
    height: int = 480,
) -> VideoInfo:
    """Render one episode of ``policy`` on the env of ``factory`` into the MP4 ``out``.

    Args:
        policy: The deterministic policy.
        factory: The run's env factory: a :class:`~fastsac_trainer.tasks.MujocoEnvFactory` (its gymnasium
            id, kwargs, time limit and import).
        out: The MP4 file to write (its folder is created).
        seed: Reset seed of the episode.
        max_steps: Most steps recorded.
        width: Frame width in pixels (a multiple of 16 keeps H.264 from resizing).
        height: Frame height in pixels.

    Raises:
        TrainerAppError: The env is not a gymnasium env this can render (a user's ``env_factory``).
    """
    import gymnasium as gym
    import imageio.v3 as iio

    from fastsac_trainer.config.exceptions import TrainerAppError
    from fastsac_trainer.tasks import MujocoEnvFactory, import_env_module
    from fastsac_trainer.tasks._quiet import quiet_mujoco_compiler

    if not isinstance(factory, MujocoEnvFactory):
        raise TrainerAppError(
            f"video=true is invalid for this run: its env comes from {type(factory).__name__}, not a "
            "gymnasium id; record videos of gymnasium tasks (task.env_id), or render your env yourself"
        )
    import_env_module(factory.env_import)
    with quiet_mujoco_compiler():
        env: Any = gym.make(factory.env_id, render_mode="rgb_array", width=width, height=height,
                            max_episode_steps=factory.max_episode_steps, **factory.env_kwargs)  # fmt: skip
    try:
        obs, _ = env.reset(seed=seed)
        frames = [env.render()]
        for _ in range(max_steps):
            action = policy(torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0))[0].cpu().numpy()
            obs, _, terminated, truncated, _ = env.step(action)
            frames.append(env.render())
            if terminated or truncated:
                break
        fps = int(env.metadata.get("render_fps", 30))
    finally:
        env.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(out, np.stack(frames), plugin="FFMPEG", fps=fps, codec="libx264", macro_block_size=16)
    return VideoInfo(out, len(frames), fps)
