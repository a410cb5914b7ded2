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
from collections.abc import Iterator
from contextlib import contextmanager
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
from fastsac_trainer.commands import EVAL, parse, parse_int
from fastsac_trainer.config.exceptions import TrainerAppError
from fastsac_trainer.run_dir import resolve_resume
from fastsac_trainer.tasks import TaskError, env_factory_for, get_task, probe_dims

__all__ = ["EvalResult", "eval_main", "evaluate", "load_policy", "one_torch_thread", "wants_video"]


def policy_device(device: str) -> torch.device:
    """``device`` (``cpu``, ``cuda``, ``cuda:N``) once this machine has it.

    Raises:
        TrainerAppError: Another kind of device, or a GPU this machine does not have (one line).
    """
    try:
        where = torch.device(device)
    except RuntimeError:
        raise TrainerAppError(f"device={device!r} is invalid: use cpu, cuda or cuda:N") from None
    if where.type not in ("cpu", "cuda"):
        raise TrainerAppError(f"device={device!r} is invalid: use cpu, cuda or cuda:N")
    count = torch.cuda.device_count() if where.type == "cuda" else 0
    if where.type == "cuda" and (where.index or 0) >= count:
        have = f"this machine has {count} GPU(s); use cuda:0" if count else "there is no CUDA here; use cpu"
        raise TrainerAppError(f"device={device!r} is invalid: {have}")
    return where


def load_policy(checkpoint: Path, device: str = "cpu") -> tuple[InferencePolicy, dict[str, Any]]:
    """A deterministic :class:`InferencePolicy` with the checkpoint's actor and obs normalizer.

    Returns:
        The policy and the checkpoint's metadata (``peek_checkpoint``: counters, dims, config, extra).

    Raises:
        TrainerAppError: The file is missing, corrupt or not a fastsac-core checkpoint, or the device
            is not one this machine has (:func:`policy_device`).
    """
    where = policy_device(device)
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
    policy = InferencePolicy(dims, cfg, device=where, deterministic=True)
    policy.actor.load_state_dict(state["actor"])
    policy.normalizer.load_state_dict(state["obs_normalizer"])
    return policy, meta


def _task_options(options: dict[str, str]) -> dict[str, Any]:
    """The ``task.*`` options of ``trainer eval``, as a task node's values (``env_kwargs`` a dict).

    Raises:
        TrainerAppError: ``task.env_kwargs`` is not a ``{key:value}`` mapping, or the time limit no count.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    given: dict[str, Any] = {k.removeprefix("task."): v for k, v in options.items() if k.startswith("task.")}
    if "env_kwargs" in given:
        text = given["env_kwargs"]
        try:
            given["env_kwargs"] = OverridesParser.create().parse_overrides([f"x={text}"])[0].value()
        except HydraException:
            given["env_kwargs"] = None
        if not isinstance(given["env_kwargs"], dict):
            raise TrainerAppError(f"task.env_kwargs={text!r} is invalid: write a mapping, e.g. '{{a:1,b:x}}'")
    if "max_episode_steps" in given:
        given["max_episode_steps"] = parse_int("task.max_episode_steps", given["max_episode_steps"], 1)
    return given


def _env_factory(
    run_dir: Path | None, options: dict[str, str], checkpoint: Path, dims: dict[str, Any]
) -> EnvFactory:
    """The env of ``task=`` (registry), or else of the run folder's saved config, once it fits the policy.

    ``task.*`` options go on top of either; without both, on ``task=gym`` (a lone checkpoint of a user's
    env). One env is made to read its sizes, so an env that cannot be made (a module no longer on the
    path) or one of other sizes than the checkpoint's is one line before any episode runs.

    Raises:
        TrainerAppError: No env to run, it cannot be made, or its sizes differ from the checkpoint's.
    """
    saved = None if run_dir is None else RunLayout(run_dir).config
    task = options.get("task")
    given = _task_options(options)
    trained = None
    try:
        if saved is not None and saved.is_file():
            cfg: Any = OmegaConf.to_container(OmegaConf.load(saved), resolve=True)
            trained = cfg["task"]["name"]
        if task is not None:
            node: dict[str, Any] | None = None if not given else {"name": task, **given}
        elif trained is not None:
            node = {**cfg["task"], **given}
        elif given:
            node = {"name": "gym", **given}
        else:
            raise TrainerAppError(
                f"checkpoint={str(checkpoint)!r} is not in a run folder with a {RunLayout(Path()).config}; "
                "pass task=NAME, or task.env_id=ID (your env) to say which env"
            )
        factory: EnvFactory = env_factory_for(node) if node is not None else get_task(str(task)).env_factory()
        seen = probe_dims(factory)
    except TaskError as error:
        raise TrainerAppError(str(error)) from None
    if (seen.obs_dim, seen.act_dim) != (dims["obs_dim"], dims["act_dim"]):
        sizes = (
            f"its env has {seen.obs_dim} observations and {seen.act_dim} actions, the checkpoint's policy "
            f"{dims['obs_dim']} and {dims['act_dim']}"
        )
        if task is None:
            raise TrainerAppError(
                f"checkpoint={str(checkpoint)!r} does not fit its run's task={trained}: {sizes}; "
                "pass task=NAME, the task it was trained on"
            )
        fix = (
            "pass the task it was trained on"
            if trained is None
            else f"leave task= out to run the task it was trained on (task={trained})"
        )
        raise TrainerAppError(f"task={task!r} is invalid for checkpoint={str(checkpoint)!r}: {sizes}; {fix}")
    return factory


def evaluate(policy: InferencePolicy, factory: EnvFactory, episodes: int, seed: int) -> EvalResult:
    """Run ``episodes`` episodes with the deterministic policy (``fastsac_core.evaluate_policy``).

    The same definition of the deterministic episode return as the evaluation during training, so
    ``trainer eval`` of a best checkpoint with that run's ``eval_episodes`` and ``eval_seed``
    reproduces the return it was kept for.
    """
    result = evaluate_policy(policy, factory, episodes, seed)
    assert result is not None  # nothing asks it to stop
    return result


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Inside, torch runs on one intra-op thread; after, on the caller's number again.

    An evaluation's batches hold at most ``MAX_PARALLEL_ENVS`` observations: one thread computes
    them as fast as many, and several evaluations at once (a sweep's, or one beside a training run)
    would otherwise keep each other's spinning threads waiting, several times slower
    (wiki/benchmarks.md, "Asynchronous resume on the GPU host").
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def eval_main(args: list[str]) -> int:
    """``trainer eval checkpoint=PATH [episodes=N] [seed=S] [task=NAME] [device=cpu] [video=true]``."""
    with one_torch_thread():
        return _eval_main(args)


def _eval_main(args: list[str]) -> int:
    options = parse(args, EVAL).options
    checkpoint, run_dir = resolve_resume(options["checkpoint"], "checkpoint")
    episodes = parse_int("episodes", options.get("episodes", "10"), 1)
    seed = parse_int("seed", options.get("seed", "0"), 0)
    policy, meta = load_policy(checkpoint, options.get("device", "cpu"))
    factory = _env_factory(run_dir, options, checkpoint, meta["dims"])
    video_out = None
    lone = [key for key in ("video_out", "video_steps") if key in options]
    if lone and not wants_video(options):
        raise TrainerAppError(f"{lone[0]}={options[lone[0]]!r} is invalid without video=true: add video=true")
    if wants_video(options):  # refused before the episodes, not after them
        from fastsac_trainer.video import VIDEO_SIZE, check_video

        default_out = RunLayout(checkpoint.parent.parent).video(checkpoint.stem)
        video_out = Path(options.get("video_out", default_out))
        video_steps = parse_int("video_steps", options.get("video_steps", "1000"), 1)
        check_video(factory, VIDEO_SIZE, video_out)
    result = evaluate(policy, factory, episodes, seed)
    sys.stdout.write(
        f"{getattr(factory, 'label', 'env')} {checkpoint}: mean return {result.mean_return:.2f} "
        f"(std {np.std(result.returns):.2f}, min {min(result.returns):.2f}, max {max(result.returns):.2f}) "
        f"over {episodes} episodes, mean length {np.mean(result.lengths):.1f}\n"
    )
    if video_out is not None:
        from fastsac_trainer.video import record_video

        video = record_video(policy, factory, video_out, seed=seed, max_steps=video_steps)
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
