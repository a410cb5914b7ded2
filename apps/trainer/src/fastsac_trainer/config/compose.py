"""Composing the config with hydra's compose API, and hydra's errors condensed to one line.

The compose API (not ``@hydra.main``) is used on purpose: hydra never changes the working
directory, never creates ``outputs/`` or ``.hydra/`` folders, and never prints its own
tracebacks; the run folder is the app's (``fastsac_trainer.run_dir``).
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterator
from typing import Any

from hydra import compose, initialize
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

from fastsac_trainer.config.exceptions import TrainerAppError
from fastsac_trainer.config.schema import RootConfig
from fastsac_trainer.config.store import PRIMARY_CONFIG, register_configs

__all__ = ["compose_config", "explicit_keys", "merge_overrides", "unknown_key"]

_MISSING = re.compile(r"Could not find '([^/']+)/([^']*)'")
_GRAMMAR = "write overrides as key=value, e.g. algo.trainer.async_options.num_collectors=2"


def compose_config(overrides: list[str]) -> DictConfig:
    """The composed config for command-line ``overrides`` (``task=ant``, ``algo.agent.gamma=0.98``).

    Raises:
        TrainerAppError: A malformed override, an unknown group option or key, or a value of the
            wrong type; the message is one line naming the override and the fix.
    """
    _refuse_hydra_settings(overrides)
    register_configs()
    try:
        with initialize(version_base=None, config_path=None):
            cfg = compose(config_name=PRIMARY_CONFIG, overrides=overrides)
    except (HydraException, OmegaConfBaseException) as error:
        raise TrainerAppError(condense_error(error)) from None
    try:  # every ${...} a value holds, resolved once here: a bad one is one line now, not a traceback later
        OmegaConf.to_container(cfg, resolve=True)
    except InterpolationResolutionError as error:
        first = str(error).splitlines()[0]
        raise TrainerAppError(
            f"an override holds an interpolation that does not resolve ({first}); a literal '${{' in a "
            "value is written '\\${' (e.g. 'task.env_kwargs={name:\"cost_\\${x}\"}')"
        ) from None
    return cfg


def _refuse_hydra_settings(overrides: list[str]) -> None:
    """Refuse what the compose API would accept and ignore, or pass on to fail later.

    Hydra's own settings (``hydra.*``) would be ignored; a key the schema does not have, added with
    ``+`` or ``++``, would reach the library records as an unknown argument.
    """
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as error:
        raise TrainerAppError(condense_error(error)) from None
    for override in parsed:
        if override.is_hydra_override():
            raise TrainerAppError(
                f"{override.key_or_group}={override.value()!r} is not supported: the trainer uses no hydra "
                "settings (hydra.*, hydra/...); its run folder is runs_root/run_name: set runs_root=DIR "
                "run_name=NAME instead"
            )
        if override.is_delete():
            raise TrainerAppError(
                f"~{override.key_or_group} is not supported: every setting has a value; set it "
                f"({override.key_or_group}=...) or leave it out for its default"
            )
        if (override.is_add() or override.is_force_add()) and not _in_schema(override.key_or_group):
            raise TrainerAppError(unknown_key(override.key_or_group))


def _in_schema(key: str) -> bool:
    """Whether ``key`` is a setting, or lies inside a free-form one (``task.env_kwargs.<name>``)."""
    node: Any = _schema()
    for part in key.split("."):
        if not isinstance(node, DictConfig):
            return True  # below a value of any type (env_kwargs): its keys are the user's
        if part not in node:
            return False
        node = node._get_node(part)
    return True


def unknown_key(key: str) -> str:
    """The one line for a key that is no setting: the key, the nearest known ones, where to see them all."""
    known = list(_schema_keys())
    leaves: dict[str, list[str]] = {}
    for full in known:
        leaves.setdefault(full.rpartition(".")[2], []).append(full)
    leaf = key.rpartition(".")[2]
    near = [
        full for name in difflib.get_close_matches(leaf, leaves, n=3, cutoff=0.6) for full in leaves[name]
    ]
    if not near:  # nothing spelled alike: the keys beside it
        parent = key.rpartition(".")[0]
        siblings = [full for full in known if full.rpartition(".")[0] == parent] or known
        near = difflib.get_close_matches(key, siblings, n=3, cutoff=0.0)
    near.sort(key=lambda full: -difflib.SequenceMatcher(None, key, full).ratio())
    return (
        f"{key} is not a setting; the nearest known: {', '.join(near[:3])}; "
        "`trainer --cfg job` lists every key with its value"
    )


@functools.cache
def _schema() -> DictConfig:
    schema: DictConfig = OmegaConf.structured(RootConfig)
    return schema


def _schema_keys(node: DictConfig | None = None, prefix: str = "") -> Iterator[str]:
    """Every setting's key path (``algo.agent.gamma``)."""
    node = _schema() if node is None else node
    for name in map(str, node):
        child = node._get_node(name)
        if isinstance(child, DictConfig):
            yield from _schema_keys(child, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}"


def explicit_keys(overrides: list[str]) -> frozenset[str]:
    """The keys the user set on the command line (``algo.agent.batch_size``), without ``+``/``~``."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return frozenset(o.key_or_group for o in parsed)


def merge_overrides(*layers: list[str]) -> list[str]:
    """The overrides of ``layers`` with one entry per key: a later layer's (or line's) entry wins.

    ``task=ant`` and ``task=hopper`` share the key ``task``; ``+k=v``, ``++k=v`` and ``~k`` count as
    ``k``. The result keeps each key's latest entry, in the order the keys were last set.

    Raises:
        TrainerAppError: An override is malformed (one line, as ``compose_config`` says it).
    """
    parser = OverridesParser.create()
    merged: dict[str, str] = {}
    for layer in layers:
        try:
            parsed = parser.parse_overrides(layer)
        except HydraException as error:
            raise TrainerAppError(condense_error(error)) from None
        for text, override in zip(layer, parsed, strict=True):
            merged.pop(override.key_or_group, None)
            merged[override.key_or_group] = text
    return list(merged.values())


def condense_error(error: BaseException) -> str:
    """One line from a hydra or OmegaConf error: what was wrong, the value seen, the fix."""
    message = str(error)
    if isinstance(error, MissingConfigException):
        match = _MISSING.search(message)
        if match:
            group, value = match.groups()
            options = re.findall(rf"Available options in '{group}':\n((?:\t.*\n?)*)", message)
            known = ", ".join(line.strip() for line in options[0].splitlines()) if options else ""
            return f"{group}={value!r} is invalid: unknown {group}; choose one of: {known}"
    if isinstance(error, OverrideParseException):
        lines = message.splitlines()
        reason = lines[1].strip() if len(lines) > 1 else ""
        override = lines[0].removeprefix("Error parsing override ")
        return f"malformed override: {override} ({reason}); {_GRAMMAR}"
    cause = error.__cause__
    if isinstance(cause, OmegaConfBaseException):
        key = getattr(cause, "full_key", None) or ""
        detail = str(cause).splitlines()[0]
        if "not in" in detail:
            return unknown_key(str(key))
        value = message.rpartition("=")[2] if "override" in message else "?"
        return f"{key}={value!r} is invalid: {detail}; give a value of the setting's type"
    return " ".join(line.strip() for line in message.splitlines() if line.strip())
