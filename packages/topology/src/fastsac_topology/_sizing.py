"""Automatic collector sizing: how many collectors, and how many CPUs each, fit this host.

# Note [automatic collector sizing]
Collectors step MuJoCo on the CPU, one process per core (``reference/env-measurements.md``: a
process per core beats a process per env), so the machine is used when every CPU that no learner
needs runs one collector:

1. Usable CPUs: the CPUs this process may run on (its affinity), capped by its cgroup's CPU quota
   (a container's ``--cpus``), never ``os.cpu_count()``.
2. Learners first: a GPU learner keeps ``cpus_per_learner`` CPUs (it launches kernels and drains
   rings); CPU learners compute their updates on the CPU and keep half of the usable CPUs between them.
3. Collector CPUs: on a host whose GPU learners are NUMA-bound, each learner's collectors take the
   CPUs of its node that its node's learners leave; elsewhere, what the learners leave of the usable
   CPUs. One collector per such CPU, rounded down to a multiple of ``num_learners``, and at most
   ``num_envs``.
4. ``num_envs`` must divide evenly. When the user set it (or it is at most the collector count), the
   count drops to the largest one that divides it; otherwise ``num_envs`` moves to the nearest
   multiple of the count, and the plan says so in one line.
5. ``cpus_per_collector``: with GPU learners, each collector is pinned to its share of the collector
   CPUs (1 when there is one per CPU); with CPU learners, collectors are left to the scheduler, which
   shares the cores with the learner's threads.

Explicit values win: a given ``num_collectors`` is kept (its CPUs are sized around it), a given
``cpus_per_collector`` (a count, or None for unpinned) is kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from fastsac_topology._cpus import learner_node
from fastsac_topology.exceptions import TopologyError
from numa_bind import HostLayout

__all__ = ["AUTO", "CollectorSizing", "size_collectors"]

AUTO: Literal["auto"] = "auto"
"""The value that asks for automatic sizing."""


@dataclass(frozen=True, kw_only=True)
class CollectorSizing:
    """The collector counts chosen for a host, and why."""

    num_collectors: int
    """Collector processes."""
    cpus_per_collector: int | None
    """CPUs pinned per collector, or None: unpinned."""
    num_envs: int
    """Envs of the whole batch (changed only when the caller let it change)."""
    reason: str
    """One line for the printed plan: what was chosen and from what."""


def _largest_divisor(num_envs: int, at_most: int, multiple_of: int) -> int:
    for count in range(min(at_most, num_envs), 0, -1):
        if count % multiple_of == 0 and num_envs % count == 0:
            return count
    raise TopologyError(
        f"num_envs={num_envs} cannot be split over a multiple of num_learners={multiple_of} collectors; "
        f"use a multiple of {multiple_of} envs"
    )


def _collector_cpus(
    host: HostLayout, devices: Sequence[str], usable: int, per_learner: int
) -> tuple[int, str]:
    """CPUs left for collectors per learner, and where they come from (Note, steps 2-3)."""
    learners = len(devices)
    if all(device == "cpu" for device in devices):
        left = usable - max(1, usable // 2)
        return max(0, left) // learners, f"{usable - left} for the CPU learner(s)"
    nodes = [learner_node(host, rank, device, []) for rank, device in enumerate(devices)]
    if all(node is not None for node in nodes):
        shares = []
        for node in set(nodes):
            on_node = nodes.count(node)
            pool = len(host.allowed_cpus_of(node)) - on_node * per_learner  # type: ignore[arg-type]
            shares.append(max(0, pool) // on_node)
        by_nodes = min(shares)
        by_quota = max(0, usable - learners * per_learner) // learners
        return min(by_nodes, by_quota), f"{per_learner} per learner, on each learner's NUMA node"
    return max(0, usable - learners * per_learner) // learners, f"{learners * per_learner} for the learner(s)"


def size_collectors(
    *,
    num_envs: int,
    envs_fixed: bool,
    devices: Sequence[str],
    host: HostLayout,
    quota: float | None,
    num_collectors: int | Literal["auto"],
    cpus_per_collector: int | Literal["auto"] | None,
    cpus_per_learner: int = 2,
) -> CollectorSizing:
    """Size ``num_collectors`` and ``cpus_per_collector`` where they are ``"auto"``.

    See Note [automatic collector sizing].

    Args:
        num_envs: Envs of the whole batch.
        envs_fixed: The user set ``num_envs`` (it must not change).
        devices: Learner devices by rank (``"cpu"`` or ``"cuda:N"``).
        host: The host layout (``numa_bind.discover_host``).
        quota: The cgroup CPU quota in CPUs (``numa_bind.cpu_quota``), None when unlimited.
        num_collectors: A count, or ``"auto"``.
        cpus_per_collector: A count, None (unpinned), or ``"auto"``.
        cpus_per_learner: CPUs a pinned GPU learner keeps.

    Raises:
        TopologyError: ``num_envs`` cannot be split over any valid collector count.
    """
    learners = len(devices)
    allowed = len(host.allowed_cpus)
    usable = allowed if quota is None else max(1, min(allowed, math.floor(quota)))
    where = f"{usable} usable CPUs (affinity {allowed}" + (f", cgroup quota {quota:g}" if quota else "") + ")"
    per_learner_cpus, kept = _collector_cpus(host, devices, usable, cpus_per_learner)
    notes = []
    if num_collectors == AUTO:
        width = cpus_per_collector if isinstance(cpus_per_collector, int) else 1  # a set width is kept
        wanted = max(1, per_learner_cpus // width) * learners
        if envs_fixed or num_envs <= wanted:
            count = _largest_divisor(num_envs, wanted, learners)
        else:
            count = wanted
            fitted = max(count, round(num_envs / count) * count)
            if fitted != num_envs:
                notes.append(f"task.num_envs {num_envs}->{fitted} (divisible by {count} collectors)")
                num_envs = fitted
        chosen = f"{count} collector{'s' if count > 1 else ''}"
    else:
        count = num_collectors
        chosen = f"num_collectors={count} (set)"
    cpus: int | None
    if cpus_per_collector != AUTO:
        cpus = cpus_per_collector
        pinning = "pinned as set" if cpus else "unpinned as set"
    elif all(device == "cpu" for device in devices):
        cpus, pinning = None, "unpinned (they share the cores with the CPU learner)"
    else:
        share = per_learner_cpus * learners // count
        cpus = share if share >= 1 else None
        pinning = f"{share} CPU each" if share >= 1 else "unpinned (fewer CPUs than collectors)"
    reason = f"auto: {chosen}, {pinning}: {where}, {kept}"
    if notes:
        reason += "; " + "; ".join(notes)
    return CollectorSizing(num_collectors=count, cpus_per_collector=cpus, num_envs=num_envs, reason=reason)
