"""The kernel's ``cpulist`` format: ``"0-3,8,10-11"`` <-> a sorted tuple of CPU (or node) ids."""

from __future__ import annotations

import re
from collections.abc import Iterable

from numa_bind.exceptions import CpuListError

__all__ = ["format_cpulist", "parse_cpulist"]

_TOKEN = re.compile(r"(\d+)(?:-(\d+))?")


def parse_cpulist(s: str) -> tuple[int, ...]:
    """Parse a kernel CPU list (as in ``/sys/devices/system/node/node0/cpulist``).

    The same format lists NUMA node ids (``/sys/devices/system/node/online``). An empty or
    all-whitespace string is the empty set (sysfs writes that for a CPU-less node).

    Args:
        s: Comma-separated ids and inclusive ascending ranges, e.g. ``"0-3,8,10-11"``.

    Returns:
        The ids, sorted ascending, without duplicates.

    Raises:
        CpuListError: A token is not ``N`` or ``N-M`` with ``N <= M`` (the error names it).
        TypeError: ``s`` is not a string.
    """
    if not isinstance(s, str):
        raise TypeError(f"parse_cpulist takes a string such as '0-3,8', got {s!r} (a {type(s).__name__})")
    text = s.strip()
    if not text:
        return ()
    ids: set[int] = set()
    for raw in text.split(","):
        token = raw.strip()
        match = _TOKEN.fullmatch(token)
        if match is None:
            why = "is empty" if not token else "is not 'N' or 'N-M' with non-negative integers"
            raise CpuListError(s, token, why)
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise CpuListError(s, token, f"is a descending range ({first} > {last})")
        ids.update(range(first, last + 1))
    return tuple(sorted(ids))


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format ids as a kernel CPU list, merging runs of two or more into ranges.

    Args:
        cpus: CPU (or node) ids in any order; duplicates are ignored.

    Returns:
        E.g. ``"0-3,8,10-11"``; the empty string for no ids.

    Raises:
        CpuListError: An id is negative.
    """
    ids = sorted(set(cpus))
    if ids and ids[0] < 0:
        raise CpuListError(repr(ids), str(ids[0]), "is negative; CPU and node ids start at 0")
    parts: list[str] = []
    start = 0
    while start < len(ids):
        stop = start
        while stop + 1 < len(ids) and ids[stop + 1] == ids[stop] + 1:
            stop += 1
        parts.append(str(ids[start]) if stop == start else f"{ids[start]}-{ids[stop]}")
        start = stop + 1
    return ",".join(parts)
