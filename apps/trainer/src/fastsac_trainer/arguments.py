"""The command line of a training run: the help text, flags refused, overrides composed into a run.

``trainer [task=NAME] [key=value ...]`` takes hydra overrides only. :func:`composed` turns them into a
validated :class:`~fastsac_trainer.config.resolve.ResolvedRun`; a resume starts from its run's saved
overrides (``overrides.txt``), the new ones winning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["Composed", "composed", "help_text", "one_launch_settings", "overrides_only"]


def help_text() -> str:
    """The text of ``trainer --help``."""
    from fastsac_trainer.commands import COMMANDS
    from fastsac_trainer.tasks import DEFAULT_TASK, GYM_TASK, TASKS

    marks = {DEFAULT_TASK: " (default)"}
    tasks = "\n".join(
        f"  {spec.name:<12} {spec.description} [{spec.num_envs} envs]{marks.get(spec.name, '')}"
        for spec in (*TASKS.values(), GYM_TASK)
    )
    commands = "".join(f"       {c.short_usage():<44}{c.brief}\n" for c in COMMANDS.values())
    return f"""usage: trainer [task=NAME] [key=value ...]        train (hydra overrides)
       trainer --cfg job [key=value ...]           print the resolved config and exit
{commands}       trainer COMMAND --help                      a command's arguments and examples
       trainer --version                           the installed version

Asynchronous FastSAC: collector processes step MuJoCo envs on CPUs while learner processes
update on GPUs (or the CPU). Runs go to runs/<run>/ (config.yaml, logs/, async_errors/,
checkpoints/, TensorBoard events).

tasks (task=NAME):
{tasks}

important options:
  algo.trainer.asynchronous=true|false             async collectors+learners, or the one-process loop
  algo.trainer.device=auto|cpu|cuda|cuda:N         learner device (auto: cuda when available)
  algo.trainer.num_learning_iterations=N           budget in iterations of task.num_envs transitions
  algo.trainer.time_limit_s=S                      stop after S seconds of training (final checkpoint)
  algo.trainer.logging_interval=N / save_interval=N
  algo.trainer.async_options.num_collectors=N|auto collector processes (task.num_envs % N == 0);
                                                   auto (default): one per CPU the learners leave
  algo.trainer.async_options.num_learners=N        learner processes, one per GPU (DDP)
  algo.trainer.async_options.learner_devices=[cuda:0,cuda:1]
  algo.trainer.async_options.cpus_per_collector=N|auto|null  pin each collector to N CPUs of its
                                                   NUMA node (auto: its share; null: unpinned)
  algo.trainer.async_options.ring_capacity=N       slots per collector ring
  algo.trainer.async_options.utd_mode=strict|learner_bound
  algo.trainer.async_options.ingest=ragged|generations
  algo.trainer.async_options.collector_inference_device=auto|cpu|cuda[:N]
                                                   auto: a small policy on the collectors' CPUs
  algo.trainer.async_options.transition_ipc=auto|on|off / weight_ipc=auto|on|off
  algo.agent.KEY=VALUE                             FastSAC hyper-parameters (batch_size, num_updates, ...)
  task.num_envs=N  seed=N  run_name=NAME  runs_root=DIR  console=auto|rich|plain
  task=gym task.env_id=ID [task.env_kwargs={{k:v}}] [task.env_import=MODULE]   your gymnasium env
  task=gym task.env_factory=package.module:function   your own batched env (wiki/tasks.md)
  resume=RUN_FOLDER|CHECKPOINT                     continue a run (steps, optimizers, normalizers)
  seed=1,2,3                                       one run per seed, one after another (runs/<name>_s<seed>)
  logger=tensorboard|wandb|tensorboard,wandb       metric loggers (wandb.project=P wandb.entity=E)

stopping:
  Ctrl+C, SIGTERM, SIGHUP: stop with a final checkpoint (exit 0); a second one stops at once
  algo.trainer.stop_grace_s=S                      a clean stop gets S seconds, then stops at once (5)
  algo.trainer.checkpoint_signal=SIGUSR1|SIGUSR2|null  also stops with a checkpoint (SLURM --signal)

Keys 1/2/3 switch console tabs.
`trainer --cfg job` lists every key with its value.  Guide: wiki/trainer.md
"""


_MULTIRUN = ("--multirun", "-m")


def overrides_only(args: list[str]) -> list[str]:
    """``args``, once none of them is a flag (hydra's ``--multirun``, ``--config-name``...).

    Raises:
        TrainerAppError: An argument is a flag; the message says what to do instead.
    """
    from fastsac_trainer.config.exceptions import TrainerAppError

    for arg in args:
        if arg in _MULTIRUN:
            raise TrainerAppError(
                f"{arg} is not supported: the trainer runs one configuration per command; for seeds use "
                "seed=1,2,3, else start one command per setting, e.g. "
                "`for g in 0.98 0.99; do trainer algo.agent.gamma=$g; done`"
            )
        if arg.startswith("-"):
            raise TrainerAppError(
                f"{arg.partition('=')[0]} is not an option: the trainer takes key=value overrides only; "
                "see `trainer --help`"
            )
    return args


class Composed(NamedTuple):
    """A command line composed into a run, with what a resume brings."""

    run: Any
    """The resolved run (``fastsac_trainer.config.resolve.ResolvedRun``)."""
    resume_from: Path | None
    """Checkpoint to resume from."""
    previous_run: Path | None
    """Run folder of that checkpoint (None for a loose checkpoint file)."""
    cuda_count: int
    """CUDA devices visible."""
    settings: list[str]
    """The run's overrides to save in ``overrides.txt``: merged, one per key, without resume=/run_name=."""


_ONE_LAUNCH = (
    "algo.trainer.time_limit_s=",
    "algo.trainer.stop_grace_s=",
    "algo.trainer.checkpoint_signal=",
    "console=",
)
"""Settings of one launch (how long this launch may train, how this job manager stops it, this terminal):
they apply to the launch that sets them, are never saved, and are ignored in a run's older
``overrides.txt`` (saved there before issue #30)."""

_NOT_SAVED = ("resume=", "run_name=", *_ONE_LAUNCH)
"""Overrides that name where a run goes or how one launch runs, not what the run is: a resume must
not inherit them."""


def one_launch_settings(overrides: list[str]) -> list[str]:
    """The one-launch settings among ``overrides`` (``algo.trainer.time_limit_s=8``, ``console=plain``...)."""
    return [o for o in overrides if o.lstrip("+").startswith(_ONE_LAUNCH)]


def composed(overrides: list[str]) -> Composed:
    """The run ``overrides`` compose into; a resume starts from its run's saved overrides."""
    import torch
    from omegaconf import OmegaConf

    from fastsac_async import RunLayout
    from fastsac_trainer.config.compose import compose_config, explicit_keys, merge_overrides
    from fastsac_trainer.config.resolve import resolve_run
    from fastsac_trainer.run_dir import resolve_resume

    composed = compose_config(overrides)
    resume_from = previous_run = None
    if composed.resume:
        resume_from, previous_run = resolve_resume(str(composed.resume))
        saved = None if previous_run is None else RunLayout(previous_run).overrides
        if saved is not None and saved.is_file():
            # The resumed run starts from the run's saved (merged) overrides; new ones win.
            lines = saved.read_text(encoding="utf-8").splitlines()
            kept = [o for o in lines if o and not o.lstrip("+").startswith(_NOT_SAVED)]
            overrides = merge_overrides(kept, overrides)
            composed = compose_config(overrides)
    cfg: dict[str, Any] = OmegaConf.to_container(composed, resolve=True)  # type: ignore[assignment]
    composed_envs = cfg["task"]["num_envs"]
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    run = resolve_run(cfg, explicit=explicit_keys(overrides), cuda_count=cuda_count)
    settings = [o for o in merge_overrides(overrides) if not o.lstrip("+").startswith(_NOT_SAVED)]
    if run.num_envs != composed_envs:
        # Sizing to this machine (or the CPU profile) moved it: a resume elsewhere keeps the replay's count.
        settings = merge_overrides(settings, [f"task.num_envs={run.num_envs}"])
    return Composed(run, resume_from, previous_run, cuda_count, settings)
