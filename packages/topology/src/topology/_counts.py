"""Count rules: every count positive; env, collector and batch splits divide evenly."""

from __future__ import annotations

from collections.abc import Iterable

from topology.exceptions import TopologyError

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


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise TopologyError(f"{name}={value} must be at least 1; set {name} to a positive integer")


def _collector_fix(num_envs: int, num_learners: int) -> str:
    valid = _collector_counts(num_envs, num_learners)
    if valid:
        return f"choose num_collectors from {format_choices(valid)}"
    upper = -(-num_envs // num_learners) * num_learners
    return (
        f"no collector count fits num_envs={num_envs} with num_learners={num_learners}; "
        f"make num_envs a multiple of num_learners (e.g. {upper})"
    )


def check_counts(*, num_envs: int, num_collectors: int, num_learners: int, batch_size: int) -> None:
    """Check the count rules.

    Raises:
        TopologyError: A count is below 1, ``num_envs % num_collectors != 0``,
            ``num_collectors % num_learners != 0`` or ``batch_size % num_learners != 0``.
    """
    for name, value in (
        ("num_envs", num_envs),
        ("num_collectors", num_collectors),
        ("num_learners", num_learners),
        ("batch_size", batch_size),
    ):
        _positive(name, value)
    if num_envs % num_collectors:
        raise TopologyError(
            f"num_envs={num_envs} is not divisible by num_collectors={num_collectors}; "
            + _collector_fix(num_envs, num_learners)
        )
    if num_collectors % num_learners:
        raise TopologyError(
            f"num_collectors={num_collectors} is not a multiple of num_learners={num_learners} "
            "(every learner owns the same number of collectors); " + _collector_fix(num_envs, num_learners)
        )
    if batch_size % num_learners:
        lower = batch_size // num_learners * num_learners
        choices = [value for value in (lower, lower + num_learners) if value > 0]
        raise TopologyError(
            f"batch_size={batch_size} is not divisible by num_learners={num_learners} "
            "(each rank samples batch_size / num_learners); "
            f"choose batch_size from {format_choices(choices)} "
            f"or num_learners from {format_choices(_divisors(batch_size))}"
        )
