"""Structured config schema (what hydra type-checks overrides against).

Key paths follow the seeds: ``task=<name>``, ``algo.agent.*`` (every
:class:`fastsac_core.FastSACConfig` field), ``algo.trainer.*`` and
``algo.trainer.async_options.*`` (every :class:`fastsac_async.AsyncOptions` field).

The agent and async-option nodes are generated from the library's frozen dataclasses, so a
field added there is configurable here without being written twice.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from fastsac_async import AsyncOptions
from fastsac_core import FastSACConfig

__all__ = [
    "APP_AGENT_DEFAULTS",
    "AgentConfig",
    "AlgoConfig",
    "AsyncOptionsConfig",
    "RootConfig",
    "TaskConfig",
    "TrainerConfig",
]


def _omegaconf_type(hint: Any) -> Any:
    """The closest type OmegaConf can validate: Literal -> str, tuple[X, ...] -> list[X]."""
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return str
    if origin is tuple:
        return list[typing.get_args(hint)[0]]  # type: ignore[misc]
    if origin in (typing.Union, types.UnionType):
        args = [_omegaconf_type(a) for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and type(None) in typing.get_args(hint):
            return args[0] | None
    return hint


def _mutable_mirror(
    name: str,
    frozen_cls: type[Any],
    auto: tuple[str, ...] = (),
    app_defaults: dict[str, Any] | None = None,
) -> type[Any]:
    """A mutable dataclass with the same fields and defaults as ``frozen_cls``, but ``app_defaults``.

    Hydra needs mutable nodes to apply overrides, and OmegaConf knows neither ``Literal`` nor
    tuples: hydra checks the types, ``fastsac_trainer.config.validate`` the values (``AsyncOptions`` checks
    its own fields when the app converts back; the agent's ranges are the app's rules). The
    ``auto`` fields default to ``"auto"`` and take any value: the app resolves them (and checks what
    the user gave) before it builds the library record. ``app_defaults`` are the trainer's own defaults
    where they differ from the library's (each with its reason beside it).
    """
    hints = typing.get_type_hints(frozen_cls)
    unknown = set(app_defaults or {}) - set(hints)
    if unknown:
        raise TypeError(f"{name}: app defaults for fields {frozen_cls.__name__} lacks: {sorted(unknown)}")
    fields = []
    for f in dataclasses.fields(frozen_cls):
        default = (app_defaults or {}).get(f.name, f.default)
        if f.name in auto:
            fields.append((f.name, Any, field(default="auto")))
            continue
        if isinstance(default, tuple):
            spec: Any = field(default_factory=functools.partial(list, default))
        else:
            spec = field(default=default)
        fields.append((f.name, _omegaconf_type(hints[f.name]), spec))
    return dataclasses.make_dataclass(name, fields, namespace={"__module__": __name__})


APP_AGENT_DEFAULTS: dict[str, Any] = {
    # The library keeps it off (a background compile thread needs a process that ends with os._exit);
    # the trainer's learner is such a worker, and a synchronous run turns it off (resolve). On the GPU
    # host it trains from about 15 s after launch instead of about 50 s and learned no later (Decision
    # log 2026-12-05, wiki/benchmarks.md "Compile in the background").
    "compile_in_background": True,
}
"""The trainer's agent defaults that differ from :class:`fastsac_core.FastSACConfig`'s."""

AgentConfig = _mutable_mirror("AgentConfig", FastSACConfig, app_defaults=APP_AGENT_DEFAULTS)
AsyncOptionsConfig = _mutable_mirror(
    "AsyncOptionsConfig", AsyncOptions, auto=("num_collectors", "cpus_per_collector")
)
"""``num_collectors`` and ``cpus_per_collector`` default to ``auto``: sized to the machine
(Note [automatic collector sizing] in topology)."""


@dataclass
class TaskConfig:
    """Which environment to train on (the ``task`` group sets these per task)."""

    name: str = "humanoid"
    """Task name as given on the command line (``task=humanoid``, ``task=gym`` for your own env)."""
    env_id: str | None = "Humanoid-v5"
    """gymnasium id of the environment; with ``task=gym`` any registered id."""
    num_envs: int = 64
    """Environments stepped per iteration (split across collectors)."""
    max_episode_steps: int | None = None
    """Override of the env's time limit; None keeps the env's own (1000 for the v5 tasks)."""
    video_camera: str | None = None
    """Camera of the videos and clips: a camera of the env's MuJoCo model by name (the locomotion tasks
    set ``track``, which follows the body); null: gymnasium's default view, which stays put."""
    env_kwargs: Any = None
    """``task=gym``: keyword arguments of ``gymnasium.make`` or of ``env_factory`` (``{key:value}``);
    null: none. Typed ``Any`` so that ``task.env_kwargs={...}`` replaces the whole mapping."""
    env_import: str | None = None
    """``task=gym``: a module imported in every process before the env is made (it registers it)."""
    env_factory: str | None = None
    """``task=gym``: ``package.module:function`` returning a batched env (wiki/tasks.md), instead of
    ``env_id``."""


@dataclass
class TrainerConfig:
    """How training runs (``algo.trainer.*``)."""

    asynchronous: bool = True
    """Collectors and learners in separate processes (false: one-process synchronous loop)."""
    device: str = "auto"
    """Learner device: auto (cuda when available, else cpu), cpu, cuda, cuda:N."""
    num_learning_iterations: int = 10_000
    """Collector iterations (each one full env batch of num_envs transitions) to train for."""
    time_limit_s: float | None = None
    """Stop (with a final checkpoint) after this many seconds of training; None: no limit."""
    logging_interval: int = 20
    """Iterations between console/TensorBoard reports."""
    save_interval: int = 1000
    """Iterations between checkpoints (a final one is always written)."""
    save_replay: bool = True
    """Save each learner's replay buffer (checkpoints/replay_rank<r>.pt) so that a resume continues from
    it; false: a resume restarts learning from an empty buffer."""
    replay_save_interval: float | None = 600.0
    """Seconds between two replay-buffer writes, made from a thread while training goes on (one is
    always written at the end of a launch); null: only at the end. Humanoid's 0.9 M transitions are a
    1.3 GB file: 600 s keeps the write a small share of the disk's time (wiki/trainer.md)."""
    eval_interval_s: float | None = 60.0
    """Seconds of training between two deterministic evaluations (null: by iterations only; both
    intervals null: no evaluation). The best one's weights go to checkpoints/best.pt."""
    eval_interval: int | None = None
    """Iterations between two deterministic evaluations (null: by seconds only); both set: whichever
    comes due first."""
    eval_episodes: int = 10
    """Episodes per evaluation (each on an env of its own; `trainer eval` runs 10 by default too)."""
    eval_seed: int = 0
    """Seed of the evaluation envs, the same for every evaluation (`trainer eval`'s default too)."""
    eval_video_every: int = 0
    """Record a clip of the 1st, (K+1)-th, ... evaluation of each launch (K = this; 0: none): one
    episode of the evaluated weights into videos/eval_<iteration>.mp4 and .gif, and TensorBoard's
    eval/video (needs offscreen OpenGL: EGL or OSMesa, see wiki/trainer.md "Videos")."""
    eval_video_steps: int = 300
    """Most env steps of a clip."""
    stop_grace_s: float = 5.0
    """After a stop signal (Ctrl+C, SIGTERM, SIGHUP, checkpoint_signal), the longest wait for the final
    checkpoint and a clean exit, not counting replay writes in progress (each up to a bound: wiki/
    trainer.md); then the run stops at once, with no final checkpoint. Keep it below
    the kill delay of the job manager (docker stop: 10 s, SLURM and Kubernetes: 30 s by default)."""
    checkpoint_signal: str | None = "SIGUSR1"
    """A signal that writes a final checkpoint and stops the run like SIGTERM: SIGUSR1, SIGUSR2, or null
    (that signal keeps its default action). SLURM sends it ahead of the time limit with
    ``#SBATCH --signal=USR1@120``, so a requeued job resumes from that checkpoint."""
    async_options: Any = field(default_factory=AsyncOptionsConfig)
    """Options of the asynchronous trainer (``algo.trainer.async_options.*``)."""


@dataclass
class AlgoConfig:
    """The algorithm: FastSAC hyper-parameters and the trainer settings."""

    name: str = "fastsac"
    """Algorithm name (only fastsac exists)."""
    agent: Any = field(default_factory=AgentConfig)
    """FastSAC hyper-parameters (``algo.agent.*``)."""
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    """Trainer settings (``algo.trainer.*``)."""


@dataclass
class WandbConfig:
    """Where a Weights & Biases run goes (``wandb.*``; used with ``logger=wandb``)."""

    project: str = "fastsac"
    """W&B project."""
    entity: str | None = None
    """W&B user or team; None: the logged-in user's default."""


@dataclass
class RootConfig:
    """The whole run configuration."""

    task: TaskConfig = field(default_factory=TaskConfig)
    """The environment."""
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    """Algorithm and trainer."""
    seed: int = 1
    """Base seed; collector i uses seed + i, learner rank r uses seed + 1000 + r (the synchronous trainer
    seed + 1000, like rank 0)."""
    run_name: str | None = None
    """Run folder name under runs_root; None: <task>-<timestamp>."""
    runs_root: str = "runs"
    """Folder that holds run folders."""
    resume: str | None = None
    """A run folder or a checkpoint file to continue from."""
    console: str = "auto"
    """auto (rich on a TTY, plain otherwise), rich, or plain."""
    logger: str = "tensorboard"
    """Metric loggers: tensorboard, wandb, or tensorboard,wandb (W&B: the optional extra ``wandb``)."""
    wandb: WandbConfig = field(default_factory=WandbConfig)
    """Weights & Biases project and entity."""
