"""Host discovery from sysfs: NUMA nodes, their online CPUs and memory, and the allowed CPUs.

Every path is read under a ``sysfs_root`` parameter, so tests build synthetic trees in a temp dir.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path

from numa_bind._cpulist import parse_cpulist
from numa_bind._gpu import gpu_localities
from numa_bind._layout import HostLayout, NumaNode
from numa_bind._nvml import NvmlProvider

__all__ = ["discover_host", "online_cpus"]

_LOG = logging.getLogger(__name__)
_NODE_DIR = re.compile(r"node(\d+)")
_MEMTOTAL = re.compile(r"MemTotal:\s*(\d+)\s*kB")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def online_cpus(sysfs_root: str | os.PathLike[str] = "/sys") -> tuple[int, ...]:
    """The online CPUs (``<sysfs_root>/devices/system/cpu/online``).

    Falls back to ``0 .. os.cpu_count()-1`` when the file is missing.
    """
    text = _read(Path(sysfs_root) / "devices/system/cpu/online")
    if text is None:
        return tuple(range(os.cpu_count() or 1))
    return parse_cpulist(text)


def _node_memory_bytes(node_dir: Path) -> int:
    text = _read(node_dir / "meminfo")
    match = _MEMTOTAL.search(text or "")
    return int(match.group(1)) * 1024 if match else 0


def _total_memory_bytes(root: Path) -> int:
    """Online memory of a host without NUMA nodes: memory blocks in sysfs, else ``sysconf``."""
    memory = root / "devices/system/memory"
    block_text = _read(memory / "block_size_bytes")
    if block_text is not None:
        block = int(block_text.strip(), 16)
        online = sum(
            1 for entry in memory.glob("memory*") if (_read(entry / "state") or "").strip() == "online"
        )
        if online:
            return online * block
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _discover_nodes(root: Path, online: tuple[int, ...]) -> tuple[NumaNode, ...]:
    node_root = root / "devices/system/node"
    online_set = set(online)
    nodes: list[NumaNode] = []
    if node_root.is_dir():
        for entry in node_root.iterdir():
            match = _NODE_DIR.fullmatch(entry.name)
            if match is None or not entry.is_dir():
                continue
            cpus = parse_cpulist(_read(entry / "cpulist") or "")
            nodes.append(
                NumaNode(
                    id=int(match.group(1)),
                    cpus=tuple(cpu for cpu in cpus if cpu in online_set),
                    memory_bytes=_node_memory_bytes(entry),
                )
            )
    if not nodes:
        _LOG.debug("no NUMA nodes under %s: treating the host as one node 0", node_root)
        return (NumaNode(id=0, cpus=online, memory_bytes=_total_memory_bytes(root)),)
    return tuple(sorted(nodes, key=lambda node: node.id))


def discover_host(
    *,
    sysfs_root: str | os.PathLike[str] = "/sys",
    with_gpus: bool = True,
    allowed_cpus: Iterable[int] | None = None,
    nvml: NvmlProvider | None = None,
) -> HostLayout:
    """Read the host's NUMA layout (and, optionally, GPU locality) from sysfs.

    Args:
        sysfs_root: Where sysfs is mounted; tests pass a synthetic tree.
        with_gpus: Also find each visible CUDA device's locality (see ``gpu_localities``).
        allowed_cpus: The CPUs this process may use; defaults to ``os.sched_getaffinity(0)``
            (or every online CPU where that call does not exist). Offline CPUs are dropped.
        nvml: An NVML provider to use instead of pynvml (tests inject a fake).

    Returns:
        The layout. A host without ``devices/system/node`` is one node 0 holding every
        online CPU.
    """
    root = Path(sysfs_root)
    online = online_cpus(root)
    if allowed_cpus is None:
        allowed_cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else online
    online_set = set(online)
    allowed = tuple(sorted(cpu for cpu in set(allowed_cpus) if cpu in online_set))
    gpus = gpu_localities(sysfs_root=root, nvml=nvml) if with_gpus else ()
    return HostLayout(nodes=_discover_nodes(root, online), allowed_cpus=allowed, gpus=gpus)
