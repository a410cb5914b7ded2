"""Validation of the composed config: every invalid value becomes one :class:`ConfigError`.

Types are already checked by hydra against the schema. Each rule lives in one place: the app's
own settings (task, trainer, console, the devices on this machine) are checked here;
``fastsac_core.FastSACConfig`` checks the agent's fields when it is built and
``fastsac_core.batch_per_env`` the batch's split over the envs, ``fastsac_async.AsyncOptions`` checks
its fields when it is built, ``fastsac_topology.check_counts`` owns the count rules
(``num_envs % num_collectors`` ...) and ``fastsac_topology.check_learner_devices`` the learner device
list. Their errors come back here and are worded as the app's (the key path, the value seen, the
fix: :func:`agent_config_error`, the one mapping of the agent's errors, and
:func:`topology_config_error`, which the placement and the collector sizing use too).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from fastsac_async import AsyncConfigError, AsyncOptions, EvalSettings
from fastsac_core import ConfigError as AgentConfigError
from fastsac_core import FastSACConfig, batch_per_env
from fastsac_topology import AUTO, TopologyError, check_counts, check_learner_devices
from fastsac_trainer.config.exceptions import ConfigError, TrainerAppError
from fastsac_trainer.loggers import LOGGERS, wandb_missing

__all__ = [
    "CHECKPOINT_SIGNALS",
    "agent_config",
    "agent_config_error",
    "async_options",
    "check_counts_of",
    "check_device",
    "normalize_switch",
    "topology_config_error",
    "validate_config",
]

_OPTS = "algo.trainer.async_options"
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")
_SWITCHES = ("auto", "on", "off")
CHECKPOINT_SIGNALS = ("SIGUSR1", "SIGUSR2")
"""Values of ``algo.trainer.checkpoint_signal`` besides null."""


def _get(cfg: Mapping[str, Any], path: str) -> Any:
    node: Any = cfg
    for part in path.split("."):
        node = node[part]
    return node


def normalize_switch(value: object) -> object:
    """YAML booleans for an auto/on/off switch: true -> ``on``, false -> ``off``."""
    if value is True or (isinstance(value, str) and value.lower() == "true"):
        return "on"
    if value is False or (isinstance(value, str) and value.lower() == "false"):
        return "off"
    return value


def check_device(setting: str, spec: str, cuda_count: int) -> None:
    """Raise unless ``spec`` is auto, cpu, cuda or an existing cuda:N.

    The learner device list is topology's to check (``check_learner_devices``).
    """
    if spec == "auto":
        return
    if not isinstance(spec, str) or not _DEVICE.match(spec):
        raise ConfigError(setting, spec, "use auto, cpu, cuda or cuda:N")
    if spec.startswith("cuda"):
        if cuda_count == 0:
            raise ConfigError(setting, spec, "CUDA is not available on this machine; use cpu (or auto)")
        index = int(spec.partition(":")[2] or 0)
        if index >= cuda_count:
            fix = f"this machine has {cuda_count} CUDA device(s): use cuda:0..cuda:{cuda_count - 1}"
            raise ConfigError(setting, spec, fix)


_Rule = tuple[str, Callable[[Any], bool], str]


_RULES: tuple[_Rule, ...] = (
    ("task.num_envs", lambda v: v >= 1, "use at least 1 env"),
    ("task.max_episode_steps", lambda v: v is None or v >= 1, "use a positive step count or null"),
    ("seed", lambda v: v >= 0, "use a non-negative seed"),
    ("console", lambda v: v in ("auto", "rich", "plain"), "use auto, rich or plain"),
    ("logger", lambda v: set(v.split(",")) <= set(LOGGERS), "use tensorboard, wandb or tensorboard,wandb"),
    ("logger", lambda v: not wandb_missing(v), "wandb is not installed: `uv sync --extra wandb`"),
    ("algo.name", lambda v: v == "fastsac", "only fastsac exists"),
    ("algo.trainer.num_learning_iterations", lambda v: v >= 1, "use at least 1 iteration"),
    ("algo.trainer.logging_interval", lambda v: v >= 1, "use a positive number of iterations"),
    ("algo.trainer.save_interval", lambda v: v >= 1, "use a positive number of iterations"),
    (
        "algo.trainer.replay_save_interval",
        lambda v: v is None or v > 0,
        "use a positive number of seconds, or null to write the replay buffer only at the end",
    ),
    ("algo.trainer.time_limit_s", lambda v: v is None or v > 0, "use a positive number of seconds or null"),
    ("algo.trainer.stop_grace_s", lambda v: v > 0, "use a positive number of seconds, e.g. 5"),
    ("algo.trainer.eval_video_steps", lambda v: v >= 1, "use at least 1 step"),
    (
        "algo.trainer.checkpoint_signal",
        lambda v: v in (None, *CHECKPOINT_SIGNALS),
        "use SIGUSR1, SIGUSR2 or null (SIGINT, SIGTERM and SIGHUP always stop the run)",
    ),
)


_AUTO_FIXES = {
    "num_collectors": "use auto (sized to this machine) or at least 1 collector",
    "cpus_per_collector": "use auto (sized to this machine), a positive CPU count, or null (unpinned)",
}
"""The app's words for the two options that may also be ``auto`` (sized before the record is built)."""

_NULL_FIXES = {"max_lead": "use a positive slot count, or null (the ring is the only bound)"}
"""The app's words where the record's fix names Python's ``None``: on the command line it is ``null``."""

_TOPOLOGY_PATHS = {
    "num_envs": "task.num_envs",
    "num_collectors": f"{_OPTS}.num_collectors",
    "num_learners": f"{_OPTS}.num_learners",
    "batch_size": "algo.agent.batch_size",
    "learner_devices": f"{_OPTS}.learner_devices",
    "collector_inference_device": f"{_OPTS}.collector_inference_device",
    "cpus_per_collector": f"{_OPTS}.cpus_per_collector",
}
"""Key path of each setting a ``TopologyError`` names (``error.setting``). ``trainer_device`` has none:
topology sees the resolved ``algo.trainer.device``, not the value the user wrote; nor has
``cpus_per_learner``, which the app does not expose."""


def topology_config_error(error: TopologyError) -> TrainerAppError:
    """Topology's error worded as the app's: the key path of its setting, the value seen and the fix.

    An error that names no setting with a key path keeps topology's own (first) line.
    """
    path = _TOPOLOGY_PATHS.get(error.setting or "")
    if path is None:
        return TrainerAppError(str(error).splitlines()[0])
    return ConfigError(path, error.value, error.fix)


_AGENT = "algo.agent"


def agent_config_error(error: AgentConfigError) -> TrainerAppError:
    """The agent's error worded as the app's: ``algo.agent.<setting>``, the value seen and the fix.

    An error that names no setting keeps its own (first) line.
    """
    if error.setting is None:
        return TrainerAppError(str(error).splitlines()[0])
    return ConfigError(f"{_AGENT}.{error.setting}", error.value, error.fix)


def agent_config(node: Mapping[str, Any], num_envs: int | None = None) -> FastSACConfig:
    """The library record of ``algo.agent``, its batch checked against ``num_envs`` when given.

    Args:
        node: ``algo.agent``.
        num_envs: Envs of the run (``task.num_envs``, after sizing); None checks the fields only.

    Raises:
        ConfigError: A field the record refuses (its own rule), or a batch that does not split over
            the envs, worded with the key path.
    """
    try:
        agent = FastSACConfig(**node)
        if num_envs is not None:
            batch_per_env(agent.batch_size, num_envs)
    except AgentConfigError as error:
        raise agent_config_error(error) from None
    return agent


def async_options(node: Mapping[str, Any]) -> AsyncOptions:
    """The library record of ``algo.trainer.async_options``; an ``auto`` count takes the record's default.

    Raises:
        ConfigError: A field the record refuses (its own rule), worded with the key path.
    """
    values = {key: value for key, value in node.items() if not (key in _AUTO_FIXES and value == AUTO)}
    if values.get("learner_devices") is not None:
        values["learner_devices"] = tuple(values["learner_devices"])
    try:
        return AsyncOptions(**values)
    except AsyncConfigError as error:
        assert error.setting is not None  # every AsyncOptions rule names its field
        raise ConfigError(
            f"{_OPTS}.{error.setting}",
            error.value,
            {**_AUTO_FIXES, **_NULL_FIXES}.get(error.setting, error.fix),
        ) from None


def eval_settings(trainer: Mapping[str, Any], factory: object) -> EvalSettings | None:
    """The library record of ``algo.trainer.eval_*``; None when both intervals are null (no evaluation).

    Args:
        trainer: ``algo.trainer``.
        factory: The run's env factory (what the clips of ``eval_video_every`` render).

    Raises:
        ConfigError: A value the record refuses (its own rule), worded with the key path, or clips
            asked of an env that is not a gymnasium id.
        TrainerAppError: Clips asked of an env that cannot render, or of a ``task.video_camera`` it lacks.
    """
    every = trainer["eval_video_every"]
    if trainer["eval_interval_s"] is None and trainer["eval_interval"] is None:
        if every:
            fix = "use 0, or turn evaluation on (eval_interval_s or eval_interval): clips are of evaluations"
            raise ConfigError("algo.trainer.eval_video_every", every, fix)
        return None
    clips = None
    if isinstance(every, int) and every > 0:
        from fastsac_trainer.tasks import MujocoEnvFactory
        from fastsac_trainer.video import CLIP_SIZE, EvalClips, check_video

        if not isinstance(factory, MujocoEnvFactory):
            fix = (f"use 0: clips are rendered of gymnasium tasks (task.env_id), and this run's env comes "
                   f"from {type(factory).__name__}")  # fmt: skip
            raise ConfigError("algo.trainer.eval_video_every", every, fix)
        check_video(factory, CLIP_SIZE)
        clips = EvalClips(factory, trainer["eval_video_steps"])
    try:
        return EvalSettings(
            interval_s=trainer["eval_interval_s"],
            interval=trainer["eval_interval"],
            episodes=trainer["eval_episodes"],
            seed=trainer["eval_seed"],
            video_every=every,
            video=clips,
        )
    except AsyncConfigError as error:
        assert error.setting is not None  # every EvalSettings rule names its field
        raise ConfigError(f"algo.trainer.{error.setting}", error.value, error.fix) from None


def check_counts_of(cfg: Mapping[str, Any]) -> None:
    """The count rules of topology on the config's counts (``num_collectors`` may still be ``auto``).

    Raises:
        ConfigError: A count that breaks a rule, with the key path of the count to change.
    """
    opts = _get(cfg, _OPTS)
    try:
        check_counts(
            num_envs=cfg["task"]["num_envs"],
            num_collectors=opts["num_collectors"],
            num_learners=opts["num_learners"],
            batch_size=cfg["algo"]["agent"]["batch_size"],
            names={"num_envs": "task.num_envs"},
        )
    except TopologyError as error:
        raise topology_config_error(error) from None


def validate_config(cfg: dict[str, Any], cuda_count: int) -> None:
    """Check the app's value rules, the agent's fields, the async options, the count rules and the devices.

    The batch's split over the envs is checked once the env count is final (``resolve_run``).

    ``cfg`` is the composed config as plain containers; the auto/on/off switches are normalised
    in place (YAML booleans accepted).

    Raises:
        ConfigError: The first invalid value, with its key path and the fix.
    """
    opts = _get(cfg, _OPTS)
    for switch in ("transition_ipc", "weight_ipc"):
        opts[switch] = normalize_switch(opts[switch])
    for path, ok, fix in _RULES:
        value = _get(cfg, path)
        if not ok(value):
            raise ConfigError(path, value, fix)
    if cfg["run_name"] is not None:
        from fastsac_trainer.run_dir import check_run_name

        check_run_name(cfg["run_name"], cfg["runs_root"])
    agent_config(cfg["algo"]["agent"])
    async_options(opts)
    check_counts_of(cfg)
    check_device("algo.trainer.device", cfg["algo"]["trainer"]["device"], cuda_count)
    check_device(f"{_OPTS}.collector_inference_device", opts["collector_inference_device"], cuda_count)
    if opts["learner_devices"] is not None:
        try:
            check_learner_devices(
                opts["learner_devices"], num_learners=opts["num_learners"], num_cuda_devices=cuda_count
            )
        except TopologyError as error:
            raise topology_config_error(error) from None
