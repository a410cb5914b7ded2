"""What the kernel will let this process bind to: the cpuset's CPUs and memory nodes."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from numa_bind._cpulist import parse_cpulist
from numa_bind._syscalls import MPOL_F_MEMS_ALLOWED, syscalls
from numa_bind.exceptions import CpuListError

__all__ = ["bindable_cpus", "bindable_nodes"]

_LOG = logging.getLogger(__name__)


def _read_cpulist(path: Path) -> tuple[int, ...] | None:
    try:
        return parse_cpulist(path.read_text())
    except (OSError, CpuListError):
        return None


def _cpuset_cpus() -> tuple[int, ...] | None:
    """The effective CPUs of this process's cpuset cgroup (v2 or v1), or None if unreadable."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            found = _read_cpulist(Path("/sys/fs/cgroup") / relative / "cpuset.cpus.effective")
        elif "cpuset" in controllers.split(","):
            found = _read_cpulist(Path("/sys/fs/cgroup/cpuset") / relative / "cpuset.effective_cpus")
        else:
            continue
        if found:
            return found
    return None


def bindable_cpus() -> tuple[int, ...]:
    """The online CPUs this process may be bound to.

    That is the cpuset's effective CPUs where the cgroup files are readable, else the process's
    current affinity (so, without a readable cpuset, a process can narrow but not widen it).
    """
    online = _read_cpulist(Path("/sys/devices/system/cpu/online"))
    allowed = _cpuset_cpus()
    if allowed is None:
        allowed = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    return allowed if online is None else tuple(cpu for cpu in allowed if cpu in set(online))


def bindable_nodes() -> tuple[int, ...]:
    """The NUMA nodes with memory that this process may bind memory to.

    The kernel's answer (``get_mempolicy(MPOL_F_MEMS_ALLOWED)``, i.e. the cpuset's memory nodes)
    intersected with the nodes that have memory (``/sys/devices/system/node/has_memory``).
    """
    with_memory = _read_cpulist(Path("/sys/devices/system/node/has_memory"))
    calls = syscalls()
    allowed: tuple[int, ...] | None = None
    if calls is not None:
        try:
            allowed = calls.get_mempolicy(MPOL_F_MEMS_ALLOWED)[1]
        except OSError as exc:
            _LOG.debug("get_mempolicy(MPOL_F_MEMS_ALLOWED) failed: %s", exc)
    if allowed is None:
        allowed = with_memory if with_memory is not None else (0,)
    return allowed if with_memory is None else tuple(node for node in allowed if node in set(with_memory))
