"""The CPU time a process's cgroup may use: its CFS quota, in CPUs (cgroup v2 ``cpu.max`` or v1).

A container limited with ``--cpus=4`` on a 64-core host still sees 64 CPUs in its affinity: the
quota, not the affinity, says how many can run at once. The effective limit is the smallest quota
on the way from the process's cgroup up to the root.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

__all__ = ["cpu_quota"]


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def _v2_limit(folder: Path) -> float | None:
    try:
        quota, period = (folder / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else _ratio(quota, period)


def _v1_limit(folder: Path) -> float | None:
    try:
        quota = (folder / "cpu.cfs_quota_us").read_text().strip()
        period = (folder / "cpu.cfs_period_us").read_text().strip()
    except OSError:
        return None
    return _ratio(quota, period)


def _smallest_up_to(root: Path, relative: str, read: Callable[[Path], float | None]) -> float | None:
    limits = []
    folder = root / relative.strip("/")
    while True:
        limit = read(folder)
        if limit is not None:
            limits.append(limit)
        if folder == root or root not in folder.parents:
            break
        folder = folder.parent
    return min(limits) if limits else None


def cpu_quota(
    *, proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> float | None:
    """CPUs' worth of run time this process's cgroup may use (quota / period); None: no limit, or unknown.

    Args:
        proc_cgroup: The process's cgroup membership file (a test passes a synthetic one).
        root: Where the cgroup hierarchy is mounted.
    """
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            found = _smallest_up_to(root, path, _v2_limit)
        elif "cpu" in controllers.split(","):
            found = _smallest_up_to(root / controllers, path, _v1_limit)
        else:
            continue
        if found is not None:
            limits.append(found)
    return min(limits) if limits else None
