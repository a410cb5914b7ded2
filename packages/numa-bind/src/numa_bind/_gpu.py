"""GPU locality: which NUMA node and CPUs are PCIe-local to each CUDA device.

# Note [CUDA indices vs NVML indices]
NVML numbers GPUs in PCI bus order and ignores ``CUDA_VISIBLE_DEVICES``. CUDA numbers the
visible devices in ``CUDA_DEVICE_ORDER``: ``PCI_BUS_ID`` (PCI order, like NVML) or the default
``FASTEST_FIRST``, whose order among devices is a heuristic. The mapping used here:

1. ``cuda_pci_bus_ids`` given by the caller (e.g. from ``torch.cuda.get_device_properties``):
   exact; NVML is matched by bus id and is not even needed.
2. ``CUDA_VISIBLE_DEVICES`` entries of the form ``GPU-<uuid or unique prefix>``: exact, matched
   against NVML's UUIDs.
3. Integer entries (or no ``CUDA_VISIBLE_DEVICES``) are taken as PCI-order indices when
   ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. Under ``FASTEST_FIRST`` they are taken in PCI order only
   when every GPU is the same model (then no device is "faster" and CUDA falls back to bus
   order in practice; CUDA does not document this, so it is an assumption, logged once).
   Mixed models under ``FASTEST_FIRST`` give "unknown" locality rather than a guess.

``MIG-`` entries report unknown locality. As in CUDA, parsing ``CUDA_VISIBLE_DEVICES`` stops at
the first entry that names no device (so ``"-1"`` hides every GPU).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from numa_bind._cpulist import parse_cpulist
from numa_bind._layout import GpuLocality
from numa_bind._nvml import NvmlProvider, open_pynvml
from numa_bind.exceptions import CpuListError

__all__ = ["FROM_ENV", "FromEnv", "gpu_localities", "normalize_pci_bus_id"]

_LOG = logging.getLogger(__name__)
_PCI = re.compile(r"([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")
_assumption_logged = False


class FromEnv(enum.Enum):
    """Marker type: read the setting from the process environment."""

    FROM_ENV = "from-env"


FROM_ENV = FromEnv.FROM_ENV
"""Default of ``gpu_localities``'s environment-backed parameters."""


def normalize_pci_bus_id(bus_id: str) -> str:
    """Write a PCI address the way sysfs names it: ``"00000000:3B:00.0"`` -> ``"0000:3b:00.0"``.

    Raises:
        ValueError: ``bus_id`` is not ``domain:bus:device.function`` in hex.
    """
    match = _PCI.fullmatch(bus_id.strip())
    if match is None:
        raise ValueError(f"PCI bus id {bus_id!r} is not 'domain:bus:device.function', e.g. '0000:3b:00.0'")
    domain, bus, device, function = match.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}.{function}"


def _sysfs_locality(root: Path, bus_id: str) -> tuple[int | None, tuple[int, ...] | None]:
    device = root / "bus/pci/devices" / bus_id
    node: int | None = None
    cpus: tuple[int, ...] | None = None
    try:
        value = int((device / "numa_node").read_text().strip())
        node = value if value >= 0 else None
    except (OSError, ValueError):
        pass
    with contextlib.suppress(OSError, CpuListError):
        cpus = parse_cpulist((device / "local_cpulist").read_text())
    return node, cpus


def _locality(
    cuda_index: int, bus_id: str | None, nvml: NvmlProvider | None, nvml_index: int | None, root: Path
) -> GpuLocality:
    node: int | None = None
    cpus: tuple[int, ...] | None = None
    source: Literal["nvml", "sysfs", "unknown"] = "unknown"
    if nvml is not None and nvml_index is not None:
        reported = nvml.numa_node(nvml_index)
        if reported is not None and reported >= 0:
            node, source = reported, "nvml"
        cpus = nvml.local_cpus(nvml_index)
    if bus_id is not None:
        sys_node, sys_cpus = _sysfs_locality(root, bus_id)
        if node is None and sys_node is not None:
            node, source = sys_node, "sysfs"
        cpus = cpus if cpus is not None else sys_cpus
    return GpuLocality(
        cuda_index=cuda_index, pci_bus_id=bus_id, numa_node=node, local_cpus=cpus, source=source
    )


def _bus_id(nvml: NvmlProvider, index: int) -> str | None:
    raw = nvml.pci_bus_id(index)
    try:
        return None if raw is None else normalize_pci_bus_id(raw)
    except ValueError:
        _LOG.debug("NVML device %d has an unreadable PCI bus id %r", index, raw)
        return None


def _visible_nvml_indices(nvml: NvmlProvider, visible: str | None, order: str | None) -> list[int | None]:
    """CUDA index -> NVML index (None: visible but not mappable). See Note [CUDA indices vs NVML indices]."""
    global _assumption_logged
    count = nvml.device_count()
    names = {nvml.name(index) for index in range(count)}
    by_pci_order = order == "PCI_BUS_ID" or len(names) == 1
    if order != "PCI_BUS_ID" and by_pci_order and not _assumption_logged:
        _assumption_logged = True
        _LOG.info(
            "CUDA_DEVICE_ORDER is %r, not 'PCI_BUS_ID': assuming CUDA indices follow PCI bus order "
            "because all %d GPUs are %s; set CUDA_DEVICE_ORDER=PCI_BUS_ID to make it certain",
            order,
            count,
            next(iter(names)),
        )
    if visible is None:
        return [index if by_pci_order else None for index in range(count)]
    uuids = {index: (nvml.uuid(index) or "").lower() for index in range(count)}
    mapped: list[int | None] = []
    taken: set[int] = set()
    for raw in visible.split(","):
        token = raw.strip()
        found: int | None
        if token.lower().startswith("mig-"):
            mapped.append(None)
            continue
        if token.lower().startswith("gpu-"):
            hits = [index for index, uuid in uuids.items() if uuid.startswith(token.lower())]
            if len(hits) != 1:
                break
            found = hits[0]
        elif token.isdigit() and int(token) < count:
            found = int(token)
        else:
            break
        if found in taken:
            break
        taken.add(found)
        mapped.append(found if by_pci_order or token.lower().startswith("gpu-") else None)
    return mapped


def gpu_localities(
    *,
    sysfs_root: str | os.PathLike[str] = "/sys",
    cuda_visible_devices: str | FromEnv | None = FROM_ENV,
    cuda_device_order: str | FromEnv | None = FROM_ENV,
    cuda_pci_bus_ids: Sequence[str] | None = None,
    nvml: NvmlProvider | None = None,
) -> tuple[GpuLocality, ...]:
    """The NUMA node and local CPUs of every CUDA device this process can see.

    NVML gives each device's PCI bus id, NUMA node (where the driver supports the query) and
    CPU-affinity mask; whatever NVML cannot say is read from ``/sys/bus/pci/devices/<bus id>/``
    (``numa_node``, ``local_cpulist``). -1 from either means unknown and is reported as None.
    How CUDA indices are matched to NVML devices: Note [CUDA indices vs NVML indices].

    Args:
        sysfs_root: Where sysfs is mounted.
        cuda_visible_devices: ``CUDA_VISIBLE_DEVICES`` (None: unset, all GPUs visible);
            defaults to the environment's value.
        cuda_device_order: ``CUDA_DEVICE_ORDER``; defaults to the environment's value.
        cuda_pci_bus_ids: The PCI bus ids of the CUDA devices in CUDA index order, when the
            caller knows them; makes the mapping exact and NVML optional.
        nvml: An NVML provider to use instead of pynvml (tests inject a fake).

    Returns:
        One entry per visible CUDA device, by CUDA index; empty without NVML or GPUs. Never
        raises for a missing driver, library or GPU.
    """
    root = Path(sysfs_root)
    if cuda_pci_bus_ids is not None:
        bus_ids = [normalize_pci_bus_id(bus_id) for bus_id in cuda_pci_bus_ids]
        if nvml is not None:
            return _from_bus_ids(bus_ids, nvml, root)
        with open_pynvml() as opened:
            return _from_bus_ids(bus_ids, opened, root)
    visible = (
        os.environ.get("CUDA_VISIBLE_DEVICES") if cuda_visible_devices is FROM_ENV else cuda_visible_devices
    )
    order = os.environ.get("CUDA_DEVICE_ORDER") if cuda_device_order is FROM_ENV else cuda_device_order
    if nvml is not None:
        return _from_nvml(nvml, visible, order, root)
    with open_pynvml() as opened:
        return () if opened is None else _from_nvml(opened, visible, order, root)


def _from_nvml(
    nvml: NvmlProvider, visible: str | None, order: str | None, root: Path
) -> tuple[GpuLocality, ...]:
    result = []
    for cuda_index, nvml_index in enumerate(_visible_nvml_indices(nvml, visible, order)):
        bus_id = None if nvml_index is None else _bus_id(nvml, nvml_index)
        result.append(_locality(cuda_index, bus_id, nvml, nvml_index, root))
    return tuple(result)


def _from_bus_ids(bus_ids: list[str], nvml: NvmlProvider | None, root: Path) -> tuple[GpuLocality, ...]:
    nvml_by_bus: dict[str, int] = {}
    if nvml is not None:
        for index in range(nvml.device_count()):
            bus_id = _bus_id(nvml, index)
            if bus_id is not None:
                nvml_by_bus[bus_id] = index
    return tuple(
        _locality(cuda_index, bus_id, nvml, nvml_by_bus.get(bus_id), root)
        for cuda_index, bus_id in enumerate(bus_ids)
    )
