"""Validation of the composed config: every invalid value becomes one :class:`ConfigError`.

Types are already checked by hydra against the schema; these are the value rules (ranges,
enums, divisibility, devices). The library dataclasses re-check what they own when the config
is converted (``trainer.config.resolve``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from trainer.config.exceptions import ConfigError

__all__ = ["CHECKPOINT_SIGNALS", "check_device", "normalize_switch", "valid_divisors", "validate_config"]

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


def valid_divisors(n: int, limit: int = 8) -> str:
    """The first ``limit`` divisors of ``n`` as ``{1, 2, 4, ...}`` (the valid counts to suggest)."""
    found = [d for d in range(1, n + 1) if n % d == 0][:limit]
    return "{" + ", ".join(map(str, found)) + (", ...}" if len(found) == limit else "}")


def normalize_switch(value: object) -> object:
    """YAML booleans for an auto/on/off switch: true -> ``on``, false -> ``off``."""
    if value is True or (isinstance(value, str) and value.lower() == "true"):
        return "on"
    if value is False or (isinstance(value, str) and value.lower() == "false"):
        return "off"
    return value


def check_device(setting: str, spec: str, cuda_count: int, *, allow_auto: bool = True) -> None:
    """Raise unless ``spec`` is auto (when allowed), cpu, cuda or an existing cuda:N."""
    if allow_auto and spec == "auto":
        return
    choices = "auto, cpu, cuda or cuda:N" if allow_auto else "cpu, cuda or cuda:N"
    if not isinstance(spec, str) or not _DEVICE.match(spec):
        raise ConfigError(setting, spec, f"use {choices}")
    if spec.startswith("cuda"):
        if cuda_count == 0:
            raise ConfigError(setting, spec, "CUDA is not available on this machine; use cpu (or auto)")
        index = int(spec.partition(":")[2] or 0)
        if index >= cuda_count:
            fix = f"this machine has {cuda_count} CUDA device(s): use cuda:0..cuda:{cuda_count - 1}"
            raise ConfigError(setting, spec, fix)


_Rule = tuple[str, Callable[[Any], bool], str]


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_RULES: tuple[_Rule, ...] = (
    ("task.num_envs", lambda v: v >= 1, "use at least 1 env"),
    ("task.max_episode_steps", lambda v: v is None or v >= 1, "use a positive step count or null"),
    ("seed", lambda v: v >= 0, "use a non-negative seed"),
    ("console", lambda v: v in ("auto", "rich", "plain"), "use auto, rich or plain"),
    ("algo.name", lambda v: v == "fastsac", "only fastsac exists"),
    ("algo.trainer.num_learning_iterations", lambda v: v >= 1, "use at least 1 iteration"),
    ("algo.trainer.logging_interval", lambda v: v >= 1, "use a positive number of iterations"),
    ("algo.trainer.save_interval", lambda v: v >= 1, "use a positive number of iterations"),
    ("algo.trainer.time_limit_s", lambda v: v is None or v > 0, "use a positive number of seconds or null"),
    ("algo.trainer.stop_grace_s", lambda v: v > 0, "use a positive number of seconds, e.g. 5"),
    (
        "algo.trainer.checkpoint_signal",
        lambda v: v in (None, *CHECKPOINT_SIGNALS),
        "use SIGUSR1, SIGUSR2 or null (SIGINT, SIGTERM and SIGHUP always stop the run)",
    ),
    ("algo.agent.batch_size", lambda v: v >= 1, "use a positive batch size"),
    ("algo.agent.buffer_size", lambda v: v >= 1, "use a positive per-env capacity"),
    ("algo.agent.num_updates", lambda v: v >= 1, "use at least 1 update per iteration"),
    ("algo.agent.policy_frequency", lambda v: v >= 1, "use at least 1"),
    ("algo.agent.num_steps", lambda v: v >= 1, "use n >= 1 for the n-step return"),
    ("algo.agent.learning_starts", lambda v: v >= 0, "use 0 or more iterations"),
    ("algo.agent.gamma", lambda v: 0 < v <= 1, "use a discount in (0, 1]"),
    ("algo.agent.tau", lambda v: 0 < v <= 1, "use a soft-update rate in (0, 1]"),
    ("algo.agent.num_atoms", lambda v: v >= 2, "use at least 2 atoms"),
    ("algo.agent.amp_dtype", lambda v: v in ("bf16", "fp16"), "use bf16 or fp16"),
    ("algo.agent.cudagraph_scope", lambda v: v in ("regions", "step"), "use regions or step"),
    (
        f"{_OPTS}.num_collectors",
        lambda v: v == "auto" or (_is_count(v) and v >= 1),
        "use auto (sized to this machine) or at least 1 collector",
    ),
    (f"{_OPTS}.num_learners", lambda v: v >= 1, "use at least 1 learner"),
    (f"{_OPTS}.ring_capacity", lambda v: v >= 1, "use a positive slot count, e.g. 64"),
    (f"{_OPTS}.utd_mode", lambda v: v in ("strict", "learner_bound"), "use strict or learner_bound"),
    (f"{_OPTS}.weight_publish_interval", lambda v: v >= 1, "use a positive number of updates"),
    (f"{_OPTS}.weight_poll_interval", lambda v: v >= 1, "use a positive number of env steps"),
    (f"{_OPTS}.max_ingest_per_iter", lambda v: v >= 1, "use a positive number of slots"),
    (f"{_OPTS}.ingest", lambda v: v in ("generations", "ragged"), "use generations or ragged"),
    (f"{_OPTS}.idle_sleep_s", lambda v: v >= 0, "use 0 or a positive number of seconds"),
    (
        f"{_OPTS}.collector_spin_s",
        lambda v: 0 <= v <= 1,
        "use 0 (sleep at once) up to 1 s (a collector sees a stop request only between its waits)",
    ),
    (f"{_OPTS}.boot_timeout_s", lambda v: v > 0, "use a positive number of seconds"),
    (
        f"{_OPTS}.cpus_per_collector",
        lambda v: v is None or v == "auto" or (_is_count(v) and v >= 1),
        "use auto (sized to this machine), a positive CPU count, or null (unpinned)",
    ),
    (f"{_OPTS}.transition_ipc", lambda v: v in _SWITCHES, "use auto, on or off (quote it in yaml)"),
    (f"{_OPTS}.weight_ipc", lambda v: v in _SWITCHES, "use auto, on or off (quote it in yaml)"),
    (f"{_OPTS}.weight_ipc_min_bytes", lambda v: v >= 0, "use 0 or a positive byte count"),
)


def validate_config(cfg: dict[str, Any], cuda_count: int) -> None:
    """Check every value rule, the divisibility of the counts and the devices.

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
    agent = cfg["algo"]["agent"]
    if not agent["v_min"] < agent["v_max"]:
        raise ConfigError("algo.agent.v_min", agent["v_min"], f"use a value below v_max={agent['v_max']}")
    num_envs, collectors, learners = cfg["task"]["num_envs"], opts["num_collectors"], opts["num_learners"]
    if collectors == "auto":
        pass  # sized later to fit num_envs (topology.size_collectors); then this check runs again
    elif num_envs % collectors:
        raise ConfigError(
            f"{_OPTS}.num_collectors",
            collectors,
            f"task.num_envs={num_envs} is not divisible by it; choose from {valid_divisors(num_envs)}",
        )
    if collectors != "auto" and collectors % learners:
        raise ConfigError(
            f"{_OPTS}.num_learners",
            learners,
            f"num_collectors={collectors} is not divisible by it; choose from {valid_divisors(collectors)}",
        )
    if agent["batch_size"] % learners:
        raise ConfigError(
            "algo.agent.batch_size",
            agent["batch_size"],
            f"use a multiple of num_learners={learners}",
        )
    check_device("algo.trainer.device", cfg["algo"]["trainer"]["device"], cuda_count)
    check_device(f"{_OPTS}.collector_inference_device", opts["collector_inference_device"], cuda_count)
    devices = opts["learner_devices"]
    if devices is not None:
        for device in devices:
            check_device(f"{_OPTS}.learner_devices", device, cuda_count, allow_auto=False)
        if len(devices) != learners:
            raise ConfigError(
                f"{_OPTS}.learner_devices", devices, f"give exactly num_learners={learners} devices, or null"
            )
        if len(set(devices)) != len(devices):
            raise ConfigError(f"{_OPTS}.learner_devices", devices, "give each device once")
