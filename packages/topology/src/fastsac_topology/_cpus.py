"""NUMA nodes and CPU sets for learners and collectors.

# Note [CPU placement]
1. A learner is NUMA-bound to its GPU's local node when the host has several nodes, the learner
   is on CUDA, and the GPU's locality is known (a node with memory and allowed CPUs). Otherwise
   it is not bound (numa_node None), and neither are its collectors.
2. A bound learner gets ``cpus_per_learner`` CPUs from its node's allowed CPUs; learners on the
   same node take consecutive, disjoint slices in rank order.
3. A bound collector sits on its owner's node. Its pool is the node's allowed CPUs minus every
   learner's CPUs there; with ``cpus_per_collector`` set, the j-th collector *of that node*
   (node-local ordinal, not the global index) takes slice j of the pool; with None, all of that
   node's collectors share the whole pool.
4. Unbound learners and collectors are pinned only when ``cpus_per_collector`` is set (the user
   asked for pinning): then, from the allowed CPUs not used by steps 2-3, each unbound learner
   takes ``cpus_per_learner`` CPUs in rank order and each unbound collector
   ``cpus_per_collector`` in index order, so no collector shares a core with a learner. With
   None they are left to the scheduler.
A budget that does not fit raises ``TopologyError`` naming the CPUs available and the largest
value that fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fastsac_topology._devices import cuda_index
from fastsac_topology.exceptions import TopologyError
from numa_bind import HostLayout, format_cpulist

__all__ = ["CpuPlan", "learner_node", "place_cpus"]


@dataclass
class CpuPlan:
    """Nodes and CPU sets by rank and by collector index, plus notes."""

    learner_nodes: list[int | None]
    learner_cpus: list[tuple[int, ...] | None]
    collector_nodes: list[int | None]
    collector_cpus: list[tuple[int, ...] | None]
    notes: list[str] = field(default_factory=list)


def learner_node(host: HostLayout, rank: int, device: str, notes: list[str]) -> int | None:
    """The NUMA node learner ``rank`` on ``device`` is bound to (Note [CPU placement], 1), or None."""
    index = cuda_index(device)
    if not host.is_multi_node or index is None:
        return None
    gpu = host.gpu(index)
    node = None if gpu is None else gpu.numa_node
    if node is None:
        notes.append(
            f"rank {rank}: NUMA locality of {device} is unknown; it and its collectors are not NUMA-bound"
        )
        return None
    if node not in host.node_ids or not host.allowed_cpus_of(node) or host.node(node).memory_bytes == 0:
        notes.append(
            f"rank {rank}: {device} is local to node {node}, which has no memory or no CPUs this process may "
            "use; it and its collectors are not NUMA-bound"
        )
        return None
    return node


def _slices(pool: Sequence[int], count: int, width: int) -> list[tuple[int, ...]]:
    return [tuple(pool[i * width : (i + 1) * width]) for i in range(count)]


def _fit_error(where: str, available: int, count: int, what: str, setting: str, width: int) -> TopologyError:
    largest = available // count
    if largest:
        fix = f"set {setting} <= {largest}"
    elif what == "collector":
        fix = "use fewer collectors, or set cpus_per_collector to null (unpinned)"
    else:
        fix = f"place at most {available} learner(s) there"
    need = f"{where} has {available} CPU(s) for {count} {what}(s), which need {count * width}; {fix}"
    return TopologyError(
        f"{where} has {available} CPU(s) for {count} {what}(s) "
        f"but {setting}={width} needs {count * width}; {fix}",
        setting=setting, value=width, fix=need,
    )  # fmt: skip


def place_cpus(
    *,
    host: HostLayout,
    devices: Sequence[str],
    owners: Sequence[int],
    cpus_per_collector: int | None,
    cpus_per_learner: int,
) -> CpuPlan:
    """Choose every learner's and collector's node and CPUs (Note [CPU placement]).

    Args:
        host: The host layout.
        devices: Learner devices by rank (normalised).
        owners: The owner rank of every collector, by index.
        cpus_per_collector: CPUs per collector, or None: share the node's pool / not pinned.
        cpus_per_learner: CPUs per pinned learner.

    Raises:
        TopologyError: The CPUs do not fit.
    """
    notes: list[str] = []
    if not host.is_multi_node:
        notes.append("one NUMA node: nothing is NUMA-bound")
    elif all(device == "cpu" for device in devices):
        notes.append("learners run on cpu: nothing is NUMA-bound")
    learner_nodes = [learner_node(host, rank, device, notes) for rank, device in enumerate(devices)]
    collector_nodes = [learner_nodes[owner] for owner in owners]
    plan = CpuPlan(learner_nodes, [None] * len(devices), collector_nodes, [None] * len(owners), notes)
    used: set[int] = set()
    for node in sorted({node for node in learner_nodes if node is not None}):
        _place_node(host, node, plan, cpus_per_collector, cpus_per_learner, used)
    if cpus_per_collector is not None:
        _place_unbound(host, plan, cpus_per_collector, cpus_per_learner, used)
    else:
        unbound = sum(node is None for node in collector_nodes)
        if unbound > len(host.allowed_cpus):
            notes.append(
                f"{unbound} unbound collectors on {len(host.allowed_cpus)} allowed CPU(s): "
                "they are not pinned and will share cores"
            )
    return plan


def _place_node(
    host: HostLayout, node: int, plan: CpuPlan, per_collector: int | None, per_learner: int, used: set[int]
) -> None:
    allowed = host.allowed_cpus_of(node)
    ranks = [rank for rank, at in enumerate(plan.learner_nodes) if at == node]
    if len(ranks) * per_learner > len(allowed):
        raise _fit_error(f"node {node}", len(allowed), len(ranks), "learner", "cpus_per_learner", per_learner)
    for rank, cpus in zip(ranks, _slices(allowed, len(ranks), per_learner), strict=True):
        plan.learner_cpus[rank] = cpus
        used.update(cpus)
    pool = [cpu for cpu in allowed if cpu not in used]
    indices = [index for index, at in enumerate(plan.collector_nodes) if at == node]
    if per_collector is None:
        if not pool:
            plan.notes.append(
                f"node {node} has no CPUs left after its learners' CPUs: its collectors are not pinned"
            )
            return
        if len(indices) > len(pool):
            plan.notes.append(f"node {node}: {len(indices)} collectors share {len(pool)} CPU(s)")
        for index in indices:
            plan.collector_cpus[index] = tuple(pool)
        used.update(pool)
        return
    if len(indices) * per_collector > len(pool):
        where = f"node {node} (CPUs {format_cpulist(pool) or 'none'} after the learners' CPUs)"
        raise _fit_error(where, len(pool), len(indices), "collector", "cpus_per_collector", per_collector)
    for index, cpus in zip(indices, _slices(pool, len(indices), per_collector), strict=True):
        plan.collector_cpus[index] = cpus
        used.update(cpus)


def _place_unbound(
    host: HostLayout, plan: CpuPlan, per_collector: int, per_learner: int, used: set[int]
) -> None:
    ranks = [rank for rank, node in enumerate(plan.learner_nodes) if node is None]
    indices = [index for index, node in enumerate(plan.collector_nodes) if node is None]
    if not indices:
        return
    pool = [cpu for cpu in host.allowed_cpus if cpu not in used]
    if len(ranks) * per_learner > len(pool):
        raise _fit_error(
            "the host (allowed CPUs)", len(pool), len(ranks), "learner", "cpus_per_learner", per_learner
        )
    for rank, cpus in zip(ranks, _slices(pool, len(ranks), per_learner), strict=True):
        plan.learner_cpus[rank] = cpus
    rest = pool[len(ranks) * per_learner :]
    if len(indices) * per_collector > len(rest):
        where = f"the host (allowed CPUs left after {len(ranks)} learner(s) pinned to {per_learner} each)"
        raise _fit_error(where, len(rest), len(indices), "collector", "cpus_per_collector", per_collector)
    for index, cpus in zip(indices, _slices(rest, len(indices), per_collector), strict=True):
        plan.collector_cpus[index] = cpus
