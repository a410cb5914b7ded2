"""Fixtures for topology tests: synthetic host layouts and a resolver call with defaults."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from fastsac_topology import TrainerTopology, resolve_trainer_topology
from numa_bind import GpuLocality, HostLayout, NumaNode


def build_host(
    node_cpus: Sequence[Sequence[int]],
    gpu_nodes: Sequence[int | None] = (),
    *,
    allowed: Sequence[int] | None = None,
    memory: Sequence[int] | None = None,
) -> HostLayout:
    """A host with one node per entry of ``node_cpus`` and one GPU per entry of ``gpu_nodes``."""
    nodes = tuple(
        NumaNode(id=node, cpus=tuple(cpus), memory_bytes=(memory[node] if memory is not None else 1 << 34))
        for node, cpus in enumerate(node_cpus)
    )
    gpus = tuple(
        GpuLocality(
            cuda_index=index,
            pci_bus_id=f"0000:{index + 0x10:02x}:00.0",
            numa_node=node,
            local_cpus=None if node is None else tuple(node_cpus[node]),
            source="unknown" if node is None else "nvml",
        )
        for index, node in enumerate(gpu_nodes)
    )
    every = sorted(cpu for cpus in node_cpus for cpu in cpus)
    return HostLayout(nodes=nodes, allowed_cpus=tuple(every if allowed is None else allowed), gpus=gpus)


@pytest.fixture
def host() -> Callable[..., HostLayout]:
    """The ``build_host`` helper."""
    return build_host


DEFAULTS: dict[str, Any] = {
    "num_envs": 64,
    "num_collectors": 1,
    "num_learners": 1,
    "batch_size": 256,
    "trainer_device": "cpu",
    "learner_devices": None,
    "num_cuda_devices": 0,
    "collector_inference_device": "auto",
    "cpus_per_collector": None,
    "transition_ipc": "auto",
    "weight_ipc": "auto",
    "weight_ipc_min_bytes": 1 << 20,
    "actor_param_bytes": 0,
}


@pytest.fixture
def resolve() -> Callable[..., TrainerTopology]:
    """``resolve_trainer_topology`` with small defaults (one 16-CPU node, CPU learner); keywords override."""

    def call(**overrides: Any) -> TrainerTopology:
        kwargs = {**DEFAULTS, "host": build_host([range(16)]), **overrides}
        return resolve_trainer_topology(**kwargs)

    return call
