"""The trainer from Python: ``result = train("gym", env_id="InvertedPendulum-v5", overrides=[...])``.

:func:`train` runs exactly what the command line runs (``fastsac_trainer.training.train_run``: the
same composition, validation, run folder, console and trainers) and returns a :class:`TrainResult`.
A mistake in the settings raises :class:`~fastsac_trainer.config.exceptions.TrainerAppError` with the
command line's one-line message; a failed worker raises :class:`TrainingFailedError`, a run stopped at
once (a second Ctrl+C) :class:`TrainingAbortedError`. Call it from the main thread (it handles the stop
signals there), from a notebook or from a script under ``if __name__ == "__main__":`` (the workers
import the script again: :mod:`fastsac_trainer.main_guard`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastsac_trainer.boot_clock import next_launch
from fastsac_trainer.config.exceptions import TrainerAppError
from fastsac_trainer.main_guard import check_main_guard
from fastsac_trainer.training import RunOutcome, end_start, start_workers_first, train_run

if TYPE_CHECKING:
    from fastsac_async import PrestartedWorkers

__all__ = ["RunOutcome", "TrainResult", "TrainingAbortedError", "TrainingFailedError", "train"]

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class TrainingFailedError(TrainerAppError):
    """A worker of the run failed; the message names it and its error log."""


class TrainingAbortedError(TrainerAppError):
    """The run was stopped at once (a second stop signal, or the grace period ran out)."""


@dataclass(frozen=True, kw_only=True)
class TrainResult:
    """How a run ended, and where its files are."""

    run_dir: Path
    """The run folder (``config.yaml``, ``logs/``, ``checkpoints/``, TensorBoard events); gone when a new
    run was stopped during start-up (``stopped_during_boot``: nothing was trained)."""
    last_checkpoint: Path | None
    """The last checkpoint written (what ``trainer eval`` and ``resume=`` take); None when none."""
    metrics: dict[str, float]
    """The last reported metrics by their TensorBoard names (``rollout/mean_return``, ...)."""
    stop_reason: str
    """``completed``, ``time_limit``, the stop signal's name, ``stopped_during_boot (...)`` or
    ``nothing_to_train`` (a resume already at its budget)."""
    iterations: int
    """Iterations (full env batches) reached, counted from the run's start."""
    env_steps: int
    """Env steps (transitions) reached, counted from the run's start, as ``iterations`` are."""
    updates: int
    """Critic updates done (learner 0's)."""


def hydra_value(value: object, setting: str) -> str:
    """``value`` (plain containers, strings, numbers, booleans, None) written in hydra's override grammar.

    Raises:
        TrainerAppError: A value of another type, or a mapping key that is not an identifier.
    """
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        # A value is data, never an interpolation: ``${`` is escaped (``\${``, its backslashes doubled).
        text = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value)
        # Hydra's quoted strings: backslashes are literal except a run before a quote or the end.
        text = re.sub(r"(\\+)$", r"\1\1", text)
        return "'" + re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text) + "'"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v, setting) for v in value) + "]"
    if isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str) or not _KEY.match(key):
                raise TrainerAppError(f"{setting} key {key!r} is invalid: use identifiers as keys")
        return "{" + ",".join(f"{k}:{hydra_value(v, setting)}" for k, v in value.items()) + "}"
    raise TrainerAppError(
        f"{setting}={value!r} is invalid: a {type(value).__name__} cannot go into the run's config; "
        "pass strings, numbers, booleans, None, lists and dicts of them"
    )


def _env_overrides(
    task: str,
    env_id: str | None,
    env_factory: str | Callable[..., Any] | None,
    env_kwargs: Mapping[str, Any] | None,
    env_import: str | None,
) -> list[str]:
    from fastsac_trainer.tasks import TaskError, target_of

    overrides = [f"task={task}"]
    if env_id is not None:
        overrides.append(f"task.env_id={hydra_value(env_id, 'env_id')}")
    if env_factory is not None:
        try:
            target = env_factory if isinstance(env_factory, str) else target_of(env_factory)
        except TaskError as error:
            raise TrainerAppError(str(error)) from None
        overrides.append(f"task.env_factory={hydra_value(target, 'env_factory')}")
    if env_kwargs is not None:
        overrides.append(f"task.env_kwargs={hydra_value(dict(env_kwargs), 'env_kwargs')}")
    if env_import is not None:
        overrides.append(f"task.env_import={hydra_value(env_import, 'env_import')}")
    return overrides


def _result(outcome: RunOutcome) -> TrainResult:
    """The :class:`TrainResult` of ``outcome``, or the exception of a run that did not end well.

    Raises:
        TrainingFailedError: A worker failed.
        TrainingAbortedError: The run was stopped at once.
    """
    from fastsac_trainer.run_dir import latest_checkpoint

    if outcome.failure is not None:
        raise TrainingFailedError(outcome.failure)
    assert outcome.run_dir is not None, "the run ended without saying where"
    if outcome.aborted:
        raise TrainingAbortedError(
            f"stopped at once: no final checkpoint, the last one is {latest_checkpoint(outcome.run_dir)}; "
            f"run folder {outcome.run_dir}"
        )
    result = outcome.result
    reason = "nothing_to_train" if outcome.nothing else str(getattr(result, "stop_reason", "completed"))
    if outcome.signal is not None and reason == "stop_requested":
        reason = outcome.signal
    elif outcome.signal is not None and reason == "stopped_during_boot":
        reason = f"stopped_during_boot ({outcome.signal})"
    last = getattr(result, "last_checkpoint", None) or outcome.checkpoint
    return TrainResult(
        run_dir=outcome.run_dir,
        last_checkpoint=last,
        metrics=outcome.metrics,
        stop_reason=reason,
        iterations=int(getattr(result, "iterations", 0)),
        env_steps=int(getattr(result, "env_steps", 0)),
        updates=int(getattr(result, "updates", 0)),
    )


def train(
    task: str = "gym",
    *,
    env_id: str | None = None,
    env_factory: str | Callable[..., Any] | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    env_import: str | None = None,
    overrides: Sequence[str] = (),
) -> TrainResult:
    """Train one run, as ``trainer task=TASK ...`` would, and return how it ended.

    Args:
        task: A built-in task (``humanoid``, ``pendulum``, ...) or ``gym`` for your own env.
        env_id: ``task=gym``: a registered gymnasium id (``InvertedPendulum-v5``).
        env_factory: ``task=gym``: your batched env's factory, as ``"package.module:function"`` or
            the function (or class) itself, defined at the top of an importable module so that
            collector processes and ``trainer eval`` can import it.
        env_kwargs: Keyword arguments of ``gymnasium.make`` or of the factory.
        env_import: A module to import in every process before the env is made (it registers it).
        overrides: More ``key=value`` settings, as on the command line; they win over the above.

    Returns:
        The run folder, the last checkpoint, the last metrics and the stop reason.

    Raises:
        TrainerAppError: An invalid setting (the command line's one-line message), or a call at the
            top level of a script outside ``if __name__ == "__main__":`` (the workers import the script).
        TrainingFailedError: A worker failed (the message names it and its error log).
        TrainingAbortedError: The run was stopped at once.
    """
    check_main_guard()  # first: in a worker importing the script, nothing else may run
    if not isinstance(overrides, list | tuple) or not all(isinstance(o, str) for o in overrides):
        raise TrainerAppError(
            f"overrides={overrides!r} is invalid: pass a list of 'key=value' strings, "
            "e.g. overrides=['algo.trainer.time_limit_s=300']"
        )
    next_launch()  # this call's start-up counts from its own start (a script may call train() again)
    server = start_workers_first()  # then, before anything imports torch
    try:
        return _train(server, task, env_id, env_factory, env_kwargs, env_import, overrides)
    finally:
        end_start(server)  # unless a run was handed it


def _train(
    server: PrestartedWorkers,
    task: str,
    env_id: str | None,
    env_factory: str | Callable[..., Any] | None,
    env_kwargs: Mapping[str, Any] | None,
    env_import: str | None,
    overrides: Sequence[str],
) -> TrainResult:
    from fastsac_core import FastSACCoreError
    from fastsac_trainer.arguments import overrides_only
    from fastsac_trainer.config.compose import merge_overrides
    from fastsac_trainer.loggers import quote_logger_list
    from fastsac_trainer.seeds import seed_runs

    extra = quote_logger_list(overrides_only(list(overrides)))  # as on the command line
    given = merge_overrides(_env_overrides(task, env_id, env_factory, env_kwargs, env_import), extra)
    if len(seed_runs(given)) > 1:
        raise TrainerAppError("a list of seeds is invalid in train(): call train() once per seed (seed=N)")
    outcome = RunOutcome()
    try:
        train_run(given, outcome, server=server)
    except FastSACCoreError as error:
        raise TrainerAppError(str(error)) from None
    return _result(outcome)
