"""``trainer eval checkpoint=... episodes=N``: run the deterministic policy and print the mean return.

The policy is rebuilt from the checkpoint alone (its dims and agent config) as an
:class:`fastsac_core.InferencePolicy` with the saved actor and observation normalizer; the
environment comes from the run folder's ``config.yaml`` (``task=NAME`` overrides it), through the
same decision as training (``fastsac_trainer.tasks.env_factory_for``), so a ``task=gym`` run's env import,
kwargs and factory are found again.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from fastsac_async import RunLayout
from fastsac_core import (
    CheckpointError,
    EnvDims,
    EnvFactory,
    EvalResult,
    FastSACConfig,
    InferencePolicy,
    evaluate_policy,
    peek_checkpoint,
)
from fastsac_trainer.config.exceptions import TrainerAppError
from fastsac_trainer.run_dir import resolve_resume
from fastsac_trainer.tasks import TaskError, env_factory_for, get_task

__all__ = ["EvalResult", "eval_main", "evaluate", "load_policy", "parse_int", "parse_kv", "wants_video"]


def parse_kv(args: list[str], allowed: dict[str, str], command: str) -> dict[str, str]:
    """``key=value`` arguments of a subcommand; ``allowed`` maps each key to its help.

    Raises:
        TrainerAppError: An argument is not ``key=value`` or names an unknown key.
    """
    values: dict[str, str] = {}
    for arg in args:
        key, eq, value = arg.partition("=")
        if not eq or not key:
            raise TrainerAppError(f"malformed argument {arg!r} for `trainer {command}`; write key=value")
        if key not in allowed:
            known = ", ".join(f"{k} ({h})" for k, h in allowed.items())
            raise TrainerAppError(f"{key}={value!r} is not an option of `trainer {command}`; use {known}")
        values[key] = value
    return values


def parse_int(setting: str, value: str, minimum: int) -> int:
    """``value`` as an int of at least ``minimum``.

    Raises:
        TrainerAppError: It is not an integer, or it is below ``minimum``.
    """
    try:
        number = int(value)
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise TrainerAppError(f"{setting}={value!r} is invalid: use an integer of at least {minimum}")
    return number


def load_policy(checkpoint: Path, device: str = "cpu") -> tuple[InferencePolicy, dict[str, Any]]:
    """A deterministic :class:`InferencePolicy` with the checkpoint's actor and obs normalizer.

    Returns:
        The policy and the checkpoint's metadata (``peek_checkpoint``: counters, dims, config, extra).

    Raises:
        TrainerAppError: The file is missing, corrupt or not a fastsac-core checkpoint.
    """
    try:
        meta = peek_checkpoint(checkpoint)
        saved_dims: dict[str, Any] = meta["dims"]
        fixed: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in saved_dims.items()}
        dims = EnvDims(**fixed)
        known = {f.name for f in dataclasses.fields(FastSACConfig)}
        cfg = FastSACConfig(**{k: v for k, v in meta["config"].items() if k in known})
        state = torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True)["agent"]
    except CheckpointError as error:
        raise TrainerAppError(f"checkpoint={str(checkpoint)!r} is invalid: {error}") from None
    policy = InferencePolicy(dims, cfg, device=device, deterministic=True)
    policy.actor.load_state_dict(state["actor"])
    policy.normalizer.load_state_dict(state["obs_normalizer"])
    return policy, meta


def _env_factory(run_dir: Path | None, task: str | None, checkpoint: Path) -> EnvFactory:
    """The env of ``task`` (registry), or else of the run folder's saved config."""
    saved = None if run_dir is None else RunLayout(run_dir).config
    try:
        if task is not None:
            return get_task(task).env_factory()
        if saved is None or not saved.is_file():
            raise TrainerAppError(
                f"checkpoint {str(checkpoint)!r} is not in a run folder with a {RunLayout(Path()).config}; "
                "pass task=NAME to say which env"
            )
        cfg: Any = OmegaConf.to_container(OmegaConf.load(saved), resolve=True)
        return env_factory_for(cfg["task"])
    except TaskError as error:
        raise TrainerAppError(str(error)) from None


def evaluate(policy: InferencePolicy, factory: EnvFactory, episodes: int, seed: int) -> EvalResult:
    """Run ``episodes`` episodes with the deterministic policy (``fastsac_core.evaluate_policy``).

    The same definition of the deterministic episode return as the evaluation during training, so
    ``trainer eval`` of a best checkpoint with that run's ``eval_episodes`` and ``eval_seed``
    reproduces the return it was kept for.
    """
    result = evaluate_policy(policy, factory, episodes, seed)
    assert result is not None  # nothing asks it to stop
    return result


def eval_main(args: list[str]) -> int:
    """``trainer eval checkpoint=PATH [episodes=N] [seed=S] [task=NAME] [device=cpu] [video=true]``."""
    options = parse_kv(
        args,
        {
            "checkpoint": "a checkpoint file or a run folder (its latest checkpoint)",
            "episodes": "episodes to run, default 10",
            "seed": "env seed, default 0",
            "task": "task whose env to use, default the run's",
            "device": "cpu or cuda[:N], default cpu",
            "video": "true: also write an MP4 of one episode",
            "video_out": f"the MP4 file, default {RunLayout(Path('<run>')).video('<checkpoint>')}",
            "video_steps": "most steps in the video, default 1000",
        },
        "eval",
    )
    if "checkpoint" not in options:
        raise TrainerAppError("checkpoint is missing: `trainer eval checkpoint=runs/<run> [episodes=N]`")
    checkpoint, run_dir = resolve_resume(options["checkpoint"], "checkpoint")
    episodes = parse_int("episodes", options.get("episodes", "10"), 1)
    seed = parse_int("seed", options.get("seed", "0"), 0)
    policy, _ = load_policy(checkpoint, options.get("device", "cpu"))
    factory = _env_factory(run_dir, options.get("task"), checkpoint)
    result = evaluate(policy, factory, episodes, seed)
    sys.stdout.write(
        f"{getattr(factory, 'label', 'env')} {checkpoint}: mean return {result.mean_return:.2f} "
        f"(std {np.std(result.returns):.2f}, min {min(result.returns):.2f}, max {max(result.returns):.2f}) "
        f"over {episodes} episodes, mean length {np.mean(result.lengths):.1f}\n"
    )
    if wants_video(options):
        from fastsac_trainer.video import record_video

        default_out = RunLayout(checkpoint.parent.parent).video(checkpoint.stem)
        video = record_video(
            policy, factory, Path(options.get("video_out", default_out)), seed=seed,
            max_steps=parse_int("video_steps", options.get("video_steps", "1000"), 1),
        )  # fmt: skip
        assert video is not None  # only a should_stop stops it
        sys.stdout.write(f"video: {video.path} ({video.frames} frames, {video.fps} fps)\n")
    return 0


def wants_video(options: dict[str, str]) -> bool:
    """Whether ``video=`` asks for a video (``true``/``false``).

    Raises:
        TrainerAppError: ``video`` is neither.
    """
    value = options.get("video", "false").lower()
    if value not in ("true", "false"):
        raise TrainerAppError(f"video={options['video']!r} is invalid: use video=true or video=false")
    return value == "true"
