"""Count rules: every count positive; env, collector and batch splits divide evenly.

The one place these rules and their suggested values live: the resolver checks them, and so does an
app before it sizes anything (``names`` gives the settings the app's own key paths).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from fastsac_topology._sizing import AUTO
from fastsac_topology.exceptions import TopologyError

__all__ = ["check_counts", "format_choices"]

_SHOWN = 10


def format_choices(values: Iterable[int]) -> str:
    """``{1, 2, 4, ...}``: the first few valid values, with an ellipsis when there are more."""
    listed = list(values)
    shown = ", ".join(str(value) for value in listed[:_SHOWN])
    return "{" + shown + (", ..." if len(listed) > _SHOWN else "") + "}"


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _collector_counts(num_envs: int, num_learners: int) -> list[int]:
    return [d for d in _divisors(num_envs) if d % num_learners == 0]


def _collector_fix(envs: str, num_envs: int, learners: str, num_learners: int, collectors: str = "") -> str:
    """Valid collector counts ("choose {collectors} from {...}"), or how to make one exist."""
    valid = _collector_counts(num_envs, num_learners)
    if valid:
        return f"choose {collectors + ' ' if collectors else ''}from {format_choices(valid)}"
    upper = -(-num_envs // num_learners) * num_learners
    return (
        f"no collector count fits {envs}={num_envs} with {learners}={num_learners}; "
        f"make {envs} a multiple of {learners} (e.g. {upper})"
    )


def check_counts(
    *,
    num_envs: int,
    num_collectors: int | Literal["auto"],
    num_learners: int,
    batch_size: int,
    names: Mapping[str, str] | None = None,
) -> None:
    """Check the count rules.

    Args:
        num_envs: Envs in the global batch.
        num_collectors: Collector processes, or ``"auto"`` (sized later by ``size_collectors``,
            which keeps the rules): the rules that involve it are left for then.
        num_learners: Learner ranks.
        batch_size: The global update batch.
        names: The caller's name of a setting in the error's words (``{"num_envs": "task.num_envs"}``);
            a setting not named keeps its parameter name.

    Raises:
        TopologyError: A count is below 1, ``num_envs % num_collectors != 0``,
            ``num_collectors % num_learners != 0`` or ``batch_size % num_learners != 0``; its
            ``setting`` (the parameter's name), ``value`` and ``fix`` say which count to change.
    """
    given = names or {}
    envs, collectors, learners, batch = (
        given.get(key, key) for key in ("num_envs", "num_collectors", "num_learners", "batch_size")
    )
    for key, name, value in (
        ("num_envs", envs, num_envs),
        ("num_collectors", collectors, num_collectors),
        ("num_learners", learners, num_learners),
        ("batch_size", batch, batch_size),
    ):
        if value != AUTO and value < 1:
            raise TopologyError(
                f"{name}={value} must be at least 1; set {name} to a positive integer",
                setting=key, value=value, fix="use a positive integer",
            )  # fmt: skip
    if num_collectors != AUTO and num_envs % num_collectors:
        choose = _collector_fix(envs, num_envs, learners, num_learners)
        raise TopologyError(
            f"{envs}={num_envs} is not divisible by {collectors}={num_collectors}; "
            + _collector_fix(envs, num_envs, learners, num_learners, collectors),
            setting="num_collectors",
            value=num_collectors,
            fix=f"{envs}={num_envs} is not divisible by it; {choose}",
        )
    if num_collectors != AUTO and num_collectors % num_learners:
        owns = "(every learner owns the same number of collectors)"
        choose = _collector_fix(envs, num_envs, learners, num_learners, collectors)
        raise TopologyError(
            f"{collectors}={num_collectors} is not a multiple of {learners}={num_learners} {owns}; {choose}",
            setting="num_learners",
            value=num_learners,
            fix=f"{collectors}={num_collectors} is not divisible by it {owns}; {choose}",
        )
    if batch_size % num_learners:
        lower = batch_size // num_learners * num_learners
        choices = format_choices(value for value in (lower, lower + num_learners) if value > 0)
        raise TopologyError(
            f"{batch}={batch_size} is not divisible by {learners}={num_learners} "
            f"(each rank samples {batch} / {learners}); choose {batch} from {choices} "
            f"or {learners} from {format_choices(_divisors(batch_size))}",
            setting="batch_size",
            value=batch_size,
            fix=f"use a multiple of {learners}={num_learners}: choose from {choices}",
        )
