"""The host layout as plain frozen data: NUMA nodes, allowed CPUs and GPU locality."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["GpuLocality", "HostLayout", "LocalitySource", "NumaNode"]

LocalitySource = Literal["nvml", "sysfs", "unknown"]
"""Where a GPU's NUMA node came from; ``"unknown"`` when no source reported one."""


@dataclass(frozen=True, kw_only=True)
class NumaNode:
    """One NUMA node of the host.

    Attributes:
        id: The kernel's node id (``/sys/devices/system/node/node<id>``).
        cpus: The node's online CPUs, ascending (offline CPUs are left out).
        memory_bytes: The node's total memory; 0 for a memory-less node.
    """

    id: int
    cpus: tuple[int, ...]
    memory_bytes: int


@dataclass(frozen=True, kw_only=True)
class GpuLocality:
    """Where one CUDA device sits relative to the NUMA nodes.

    Attributes:
        cuda_index: The device's CUDA index in this process (after ``CUDA_VISIBLE_DEVICES``).
        pci_bus_id: Normalised PCI address (``"0000:3b:00.0"``), or None when unknown.
        numa_node: The PCIe-local NUMA node, or None when unknown. Never guessed: a platform
            answer of -1 ("no affinity", as on single-node and many virtual hosts) is None.
        local_cpus: The CPUs the platform reports as local to the device, or None when unknown.
        source: Where ``numa_node`` came from (``"unknown"`` exactly when it is None).
    """

    cuda_index: int
    pci_bus_id: str | None
    numa_node: int | None
    local_cpus: tuple[int, ...] | None
    source: LocalitySource


@dataclass(frozen=True, kw_only=True)
class HostLayout:
    """The NUMA nodes, the CPUs this process may use, and the GPUs' locality.

    Attributes:
        nodes: Every NUMA node, ascending by id (one node 0 on a host without NUMA).
        allowed_cpus: The online CPUs this process may run on (its affinity), ascending.
        gpus: One entry per visible CUDA device, ascending by CUDA index (may be empty).
    """

    nodes: tuple[NumaNode, ...]
    allowed_cpus: tuple[int, ...]
    gpus: tuple[GpuLocality, ...] = ()

    def __post_init__(self) -> None:
        ids = [node.id for node in self.nodes]
        if not ids:
            raise ValueError("HostLayout needs at least one NUMA node; a host without NUMA is node 0")
        if len(set(ids)) != len(ids):
            raise ValueError(f"HostLayout has duplicate node ids {ids}; each node must appear once")
        cuda = [gpu.cuda_index for gpu in self.gpus]
        if len(set(cuda)) != len(cuda):
            raise ValueError(f"HostLayout has duplicate CUDA indices {cuda}; each GPU must appear once")

    @property
    def node_ids(self) -> tuple[int, ...]:
        """The ids of all nodes, in layout order."""
        return tuple(node.id for node in self.nodes)

    @property
    def is_multi_node(self) -> bool:
        """Whether the host has more than one NUMA node (only then does binding pay off)."""
        return len(self.nodes) > 1

    def node(self, node_id: int) -> NumaNode:
        """The node with this id.

        Raises:
            KeyError: No such node (the message lists the existing ids).
        """
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(f"no NUMA node {node_id}; this host has nodes {list(self.node_ids)}")

    def gpu(self, cuda_index: int) -> GpuLocality | None:
        """The locality of CUDA device ``cuda_index``, or None when it is not in the layout."""
        for gpu in self.gpus:
            if gpu.cuda_index == cuda_index:
                return gpu
        return None

    def allowed_cpus_of(self, node_id: int) -> tuple[int, ...]:
        """The node's CPUs that this process may use (node CPUs ∩ allowed CPUs), ascending."""
        allowed = set(self.allowed_cpus)
        return tuple(cpu for cpu in self.node(node_id).cpus if cpu in allowed)
