"""Fixtures for numa-bind tests: synthetic sysfs trees and an NVML test double."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from numa_bind import cpus_from_masks


# The package's tests also run on their own (outside this repository, against an installed wheel):
# they register their markers and skip `gpu` tests without a CUDA device themselves. Inside the
# repository the root conftest does the same; a marker registered and a test skipped twice is harmless.
def pytest_configure(config: pytest.Config) -> None:
    """Register the markers these tests use."""
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu`` tests where torch sees no CUDA device (or torch is not installed)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device (run on the GPU machine)"))


TreeBuilder = Callable[..., Path]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def sysfs_tree(tmp_path: Path) -> TreeBuilder:
    """Build a sysfs tree.

    ``nodes`` maps node id -> (cpulist, MemTotal kB); ``pci`` maps bus id -> (numa_node, local_cpulist).
    """

    def build(
        *,
        online: str,
        nodes: Mapping[int, tuple[str, int]] | None = None,
        pci: Mapping[str, tuple[str, str]] | None = None,
    ) -> Path:
        root = tmp_path / "sys"
        _write(root / "devices/system/cpu/online", online + "\n")
        if nodes is not None:
            node_root = root / "devices/system/node"
            for node_id, (cpulist, mem_kb) in nodes.items():
                _write(node_root / f"node{node_id}/cpulist", cpulist + "\n")
                _write(
                    node_root / f"node{node_id}/meminfo",
                    f"Node {node_id} MemTotal:       {mem_kb} kB\nNode {node_id} MemFree:        0 kB\n",
                )
            _write(node_root / "online", ",".join(str(node) for node in nodes) + "\n")
        for bus_id, (numa_node, local_cpulist) in (pci or {}).items():
            _write(root / f"bus/pci/devices/{bus_id}/numa_node", numa_node + "\n")
            _write(root / f"bus/pci/devices/{bus_id}/local_cpulist", local_cpulist + "\n")
        return root

    return build


@dataclass
class FakeGpu:
    """One GPU as the NVML double reports it."""

    name: str
    uuid: str
    bus_id: str
    numa_node: int | None
    affinity_masks: list[int] | None = None


@dataclass
class FakeNvml:
    """An ``NvmlProvider`` over a fixed list of GPUs in NVML (PCI) order; counts every query."""

    gpus: list[FakeGpu]
    calls: list[str] = field(default_factory=list)

    def device_count(self) -> int:
        return len(self.gpus)

    def name(self, index: int) -> str | None:
        return self.gpus[index].name

    def uuid(self, index: int) -> str | None:
        return self.gpus[index].uuid

    def pci_bus_id(self, index: int) -> str | None:
        return self.gpus[index].bus_id

    def numa_node(self, index: int) -> int | None:
        self.calls.append(f"numa_node({index})")
        return self.gpus[index].numa_node

    def local_cpus(self, index: int) -> tuple[int, ...] | None:
        masks = self.gpus[index].affinity_masks
        return None if masks is None else cpus_from_masks(masks)


@pytest.fixture
def four_gpus() -> FakeNvml:
    """Four GPUs in PCI order: two per socket, NVML reports nodes 0,0,1,1 and 8-CPU masks."""
    return FakeNvml(
        [
            FakeGpu("NVIDIA H200", "GPU-aaaa0000-0000", "00000000:1B:00.0", 0, [0x00FF]),
            FakeGpu("NVIDIA H200", "GPU-bbbb1111-1111", "00000000:3B:00.0", 0, [0x00FF]),
            FakeGpu("NVIDIA H200", "GPU-cccc2222-2222", "00000000:9A:00.0", 1, [0xFF00]),
            FakeGpu("NVIDIA H200", "GPU-dddd3333-3333", "00000000:BA:00.0", 1, [0xFF00]),
        ]
    )


@pytest.fixture(scope="session", autouse=True)
def _resource_tracker_running() -> None:
    """Start multiprocessing's resource tracker before the root leak guard counts children.

    Every spawn-context start launches it once and it lives for the whole test run, so the first
    test that spawns would otherwise be blamed for it.
    """
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
