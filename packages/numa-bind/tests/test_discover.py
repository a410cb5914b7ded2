"""Host discovery from synthetic sysfs trees, and the HostLayout helpers."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from numa_bind import GpuLocality, HostLayout, NumaNode, discover_host, online_cpus
from numa_bind._cli import main

TreeBuilder = Callable[..., Path]


def test_host_without_numa_is_one_node(sysfs_tree: TreeBuilder) -> None:
    """Without devices/system/node the host is one node 0 holding every online CPU, with its memory."""
    root = sysfs_tree(online="0-7")
    layout = discover_host(sysfs_root=root, with_gpus=False, allowed_cpus=range(8))
    assert layout.node_ids == (0,)
    assert layout.nodes[0].cpus == tuple(range(8))
    assert layout.nodes[0].memory_bytes > 0
    assert not layout.is_multi_node


def test_single_numa_node(sysfs_tree: TreeBuilder) -> None:
    """A one-node tree gives that node's CPUs and MemTotal in bytes."""
    root = sysfs_tree(online="0-3", nodes={0: ("0-3", 1024)})
    layout = discover_host(sysfs_root=root, with_gpus=False, allowed_cpus=range(4))
    assert layout.nodes == (NumaNode(id=0, cpus=(0, 1, 2, 3), memory_bytes=1024 * 1024),)


def test_two_sockets(sysfs_tree: TreeBuilder) -> None:
    """Two sockets give two nodes in id order; allowed_cpus_of intersects a node with the allowed CPUs."""
    root = sysfs_tree(online="0-15", nodes={1: ("8-15", 2048), 0: ("0-7", 4096)})
    layout = discover_host(sysfs_root=root, with_gpus=False, allowed_cpus=[1, 2, 9, 30])
    assert layout.node_ids == (0, 1)
    assert layout.is_multi_node
    assert layout.node(1).cpus == tuple(range(8, 16))
    assert layout.node(0).memory_bytes == 4096 * 1024
    assert layout.allowed_cpus == (1, 2, 9)  # CPU 30 is not online
    assert layout.allowed_cpus_of(0) == (1, 2)
    assert layout.allowed_cpus_of(1) == (9,)


def test_four_nodes_with_a_memoryless_node(sysfs_tree: TreeBuilder) -> None:
    """A memory-less node reports memory_bytes 0 and keeps its CPUs; a CPU-less node has no CPUs."""
    root = sysfs_tree(online="0-11", nodes={0: ("0-3", 100), 1: ("4-7", 100), 2: ("8-11", 0), 3: ("", 500)})
    layout = discover_host(sysfs_root=root, with_gpus=False, allowed_cpus=range(12))
    assert layout.node_ids == (0, 1, 2, 3)
    assert layout.node(2).memory_bytes == 0
    assert layout.node(2).cpus == (8, 9, 10, 11)
    assert layout.node(3).cpus == ()
    assert layout.node(3).memory_bytes == 500 * 1024


def test_offline_cpus_are_left_out(sysfs_tree: TreeBuilder) -> None:
    """CPUs missing from devices/system/cpu/online are dropped from nodes and from the allowed set."""
    root = sysfs_tree(online="0-5,7", nodes={0: ("0-3", 1), 1: ("4-7", 1)})
    layout = discover_host(sysfs_root=root, with_gpus=False, allowed_cpus=range(8))
    assert layout.node(1).cpus == (4, 5, 7)
    assert layout.allowed_cpus == (0, 1, 2, 3, 4, 5, 7)
    assert online_cpus(root) == (0, 1, 2, 3, 4, 5, 7)


def test_allowed_defaults_to_affinity() -> None:
    """On the real host, allowed_cpus defaults to this process's affinity (restricted to online CPUs)."""
    layout = discover_host(with_gpus=False)
    assert set(layout.allowed_cpus) == os.sched_getaffinity(0) & set(online_cpus())
    assert set(layout.allowed_cpus) <= {cpu for node in layout.nodes for cpu in node.cpus}


def test_layout_helpers() -> None:
    """node() names the existing ids when missing; gpu() finds by CUDA index or returns None."""
    gpu = GpuLocality(cuda_index=1, pci_bus_id=None, numa_node=None, local_cpus=None, source="unknown")
    layout = HostLayout(nodes=(NumaNode(id=0, cpus=(0,), memory_bytes=1),), allowed_cpus=(0,), gpus=(gpu,))
    assert layout.gpu(1) is gpu
    assert layout.gpu(0) is None
    with pytest.raises(KeyError, match=r"no NUMA node 4; this host has nodes \[0\]"):
        layout.node(4)


@pytest.mark.parametrize(
    ("nodes", "gpus", "message"),
    [
        ((), (), "at least one NUMA node"),
        ((0, 0), (), "duplicate node ids"),
        ((0,), (2, 2), "duplicate CUDA indices"),
    ],
)
def test_layout_rejects_inconsistent_data(
    nodes: tuple[int, ...], gpus: tuple[int, ...], message: str
) -> None:
    """A layout with no nodes, repeated node ids or repeated CUDA indices is refused."""
    with pytest.raises(ValueError, match=message):
        HostLayout(
            nodes=tuple(NumaNode(id=node, cpus=(), memory_bytes=0) for node in nodes),
            allowed_cpus=(),
            gpus=tuple(
                GpuLocality(
                    cuda_index=index, pci_bus_id=None, numa_node=None, local_cpus=None, source="unknown"
                )
                for index in gpus
            ),
        )


def test_discover_with_injected_nvml(sysfs_tree: TreeBuilder, four_gpus: Any) -> None:
    """discover_host attaches GPU locality from the given NVML provider."""
    root: Path = sysfs_tree(online="0-15", nodes={0: ("0-7", 1), 1: ("8-15", 1)})
    layout = discover_host(sysfs_root=root, allowed_cpus=range(16), nvml=four_gpus)
    assert [gpu.numa_node for gpu in layout.gpus] == [0, 0, 1, 1]


def test_show_prints_a_tree_and_refuses_a_root_without_sysfs(
    sysfs_tree: TreeBuilder, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`numa-bind show` prints a given tree's nodes, and exits 2 naming a --sysfs-root that holds no sysfs."""
    root = sysfs_tree(online="0-3", nodes={0: ("0-1", 1024), 1: ("2-3", 2048)})
    assert main(["show", "--sysfs-root", str(root), "--no-gpus"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split()[:2] == ["0", "0-1"] and out.splitlines()[2].split()[:2] == ["1", "2-3"]
    with pytest.raises(SystemExit) as stopped:
        main(["show", "--sysfs-root", str(tmp_path / "nowhere")])
    assert stopped.value.code == 2
    assert "holds no devices/system" in capsys.readouterr().err
