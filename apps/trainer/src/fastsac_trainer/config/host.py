"""This machine's layout, read once per process: NUMA nodes, allowed CPUs, GPU locality, CPU quota."""

from __future__ import annotations

import functools

from numa_bind import HostLayout, cpu_quota, discover_host

__all__ = ["host_layout", "host_quota"]


@functools.cache
def host_layout(with_gpus: bool) -> HostLayout:
    """``numa_bind.discover_host`` (with GPU locality when ``with_gpus``), cached."""
    return discover_host(with_gpus=with_gpus)


@functools.cache
def host_quota() -> float | None:
    """``numa_bind.cpu_quota``: this process's cgroup CPU limit in CPUs, None when unlimited, cached."""
    return cpu_quota()
