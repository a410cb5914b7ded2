"""numa-bind: NUMA node, CPU and GPU locality discovery, and process binding via raw syscalls.

Standalone: standard library and ctypes only; ``nvidia-ml-py`` is used when installed. The
package imports on every OS; binding is Linux-only and reports "unsupported" elsewhere.
"""

from numa_bind._bind import (
    BindResult,
    MemPolicy,
    Policy,
    bind_current_process,
    binding_supported,
    bound_for_child,
    current_mempolicy,
    node_of_address,
    reset_mempolicy,
)
from numa_bind._cpulist import format_cpulist, parse_cpulist
from numa_bind._gpu import FROM_ENV, FromEnv, gpu_localities, normalize_pci_bus_id
from numa_bind._layout import GpuLocality, HostLayout, LocalitySource, NumaNode
from numa_bind._nvml import NvmlProvider, cpus_from_masks
from numa_bind._quota import cpu_quota
from numa_bind._sysfs import discover_host, online_cpus
from numa_bind.exceptions import BindingError, CpuListError

__all__ = [  # noqa: RUF022 - grouped by topic, sorted within each group
    # host layout (data)
    "GpuLocality",
    "HostLayout",
    "LocalitySource",
    "NumaNode",
    # discovery
    "FROM_ENV",
    "FromEnv",
    "NvmlProvider",
    "cpu_quota",
    "cpus_from_masks",
    "discover_host",
    "gpu_localities",
    "normalize_pci_bus_id",
    "online_cpus",
    # cpulist format
    "format_cpulist",
    "parse_cpulist",
    # binding
    "BindResult",
    "MemPolicy",
    "Policy",
    "bind_current_process",
    "binding_supported",
    "bound_for_child",
    "current_mempolicy",
    "node_of_address",
    "reset_mempolicy",
    # errors
    "BindingError",
    "CpuListError",
]
