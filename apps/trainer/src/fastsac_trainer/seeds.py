"""Several seeds in one command: ``trainer seed=1,2,3 ...`` trains one run per seed, one after another.

The runs go to sibling folders ``runs_root/<name>_s<seed>``, where ``<name>`` is ``run_name`` or,
unset, one ``<task>-<time>`` name shared by the seeds; every other override is the same for each.
``trainer plot runs/<name>_s1 runs/<name>_s2 ...`` (or ``trainer plot runs/<name>_s*``) then draws
their mean and spread as one curve, and W&B groups them under ``<name>``. A run that fails (or is
stopped at once) ends the list with its exit code.

This module holds the list's rules (its runs' overrides and names); ``fastsac_trainer.training.train_seeds``
trains the runs.
"""

from __future__ import annotations

import re
from typing import Any

from fastsac_trainer.config.exceptions import TrainerAppError

__all__ = ["seed_group", "seed_run_name", "seed_runs"]

_SEED_KEYS = ("seed=", "+seed=", "++seed=")


def seed_run_name(base: str, seed: int) -> str:
    """The folder name of ``seed``'s run in a list of seeds (``<base>_s<seed>``)."""
    return f"{base}_s{seed}"


def seed_group(run_name: str, config: dict[str, Any]) -> str | None:
    """The name a run of a seed list shares with its siblings (``<base>``), else None."""
    match = re.fullmatch(rf"(.+)_s{config['seed']}", run_name)
    return None if match is None else match.group(1)


def _seeds(value: str) -> list[int]:
    items = value.strip("[]").split(",")
    if not all(item.strip().isdigit() for item in items):
        raise TrainerAppError(
            f"seed={value!r} is invalid: seeds are non-negative integers; "
            "write one (seed=1) or a list (seed=1,2,3)"
        )
    seeds = [int(item) for item in items]
    if len(set(seeds)) != len(seeds):
        raise TrainerAppError(f"seed={value!r} is invalid: a seed is listed twice; list each seed once")
    return seeds


def seed_runs(overrides: list[str]) -> list[list[str]]:
    """One override list per seed of ``seed=a,b,...`` (``overrides`` itself when it names one seed).

    Raises:
        TrainerAppError: A seed is not a non-negative integer, is listed twice, or a list of seeds
            is combined with ``resume=`` or with a launch by torchrun on several hosts; the
            ``run_name`` the seeds' names start from is not one plain folder name.
    """
    from fastsac_trainer.cluster.context import launch_context
    from fastsac_trainer.config.store import DEFAULT_TASK
    from fastsac_trainer.run_dir import check_run_name, default_run_name

    given = [o for o in overrides if o.startswith(_SEED_KEYS)]
    if not given or "," not in given[-1]:
        return [overrides]
    seeds = _seeds(given[-1].partition("=")[2])
    if any(o.startswith("resume=") for o in overrides):
        raise TrainerAppError(
            f"{given[-1]} is invalid with resume=: a resume continues one run; resume each seed's folder "
            "on its own (resume=runs/<name>_s<seed>)"
        )
    context = launch_context()
    if context is not None and context.num_hosts > 1:
        raise TrainerAppError(
            f"{given[-1]} is invalid under torchrun with {context.num_hosts} hosts: the hosts agree on one "
            "run per launch; launch once per seed (seed=N)"
        )
    names = [o.partition("=")[2] for o in overrides if o.startswith("run_name=")]
    tasks = [o.partition("=")[2] for o in overrides if o.startswith("task=")]
    base = check_run_name(names[-1]) if names else default_run_name(tasks[-1] if tasks else DEFAULT_TASK)
    rest = [o for o in overrides if not o.startswith((*_SEED_KEYS, "run_name="))]
    return [[*rest, f"seed={seed}", f"run_name={seed_run_name(base, seed)}"] for seed in seeds]
