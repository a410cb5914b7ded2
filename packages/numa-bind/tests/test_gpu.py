"""GPU locality: NVML with sysfs fallback, CUDA_VISIBLE_DEVICES mapping, PCI id normalisation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from numa_bind import cpus_from_masks, gpu_localities, normalize_pci_bus_id

TreeBuilder = Callable[..., Path]


def _nodes(localities: tuple[Any, ...]) -> list[int | None]:
    return [gpu.numa_node for gpu in localities]


def _buses(localities: tuple[Any, ...]) -> list[str | None]:
    return [gpu.pci_bus_id for gpu in localities]


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("00000001:C1:1F.7", "0001:c1:1f.7"),
        ("10000:00:02.0", "10000:00:02.0"),
    ],
)
def test_normalize_pci_bus_id(raw: str, normal: str) -> None:
    """NVML's 8-digit domains become sysfs's 4-digit (or wider if needed) lowercase form."""
    assert normalize_pci_bus_id(raw) == normal


@pytest.mark.parametrize("raw", ["", "3b:00.0", "0000:3b:00", "0000:3g:00.0", "0000:3b:00.8"])
def test_normalize_rejects_malformed_ids(raw: str) -> None:
    """A string that is not domain:bus:device.function raises ValueError naming it."""
    with pytest.raises(ValueError, match=r"is not 'domain:bus:device\.function'"):
        normalize_pci_bus_id(raw)


def test_cpus_from_masks() -> None:
    """NVML affinity words are 64 CPUs each, least significant bit first."""
    assert cpus_from_masks([0b1011, 1]) == (0, 1, 3, 64)
    assert cpus_from_masks([0, 1 << 63]) == (127,)
    assert cpus_from_masks([]) == ()


def test_pci_order_without_visible_devices(sysfs_tree: TreeBuilder, four_gpus: Any) -> None:
    """With CUDA_DEVICE_ORDER=PCI_BUS_ID and no CUDA_VISIBLE_DEVICES, CUDA i is NVML i; NVML data is used."""
    localities = gpu_localities(
        sysfs_root=sysfs_tree(online="0-15"),
        cuda_visible_devices=None,
        cuda_device_order="PCI_BUS_ID",
        nvml=four_gpus,
    )
    assert [gpu.cuda_index for gpu in localities] == [0, 1, 2, 3]
    assert _buses(localities) == ["0000:1b:00.0", "0000:3b:00.0", "0000:9a:00.0", "0000:ba:00.0"]
    assert _nodes(localities) == [0, 0, 1, 1]
    assert {gpu.source for gpu in localities} == {"nvml"}
    assert localities[3].local_cpus == tuple(range(8, 16))


def test_visible_indices_reorder(sysfs_tree: TreeBuilder, four_gpus: Any) -> None:
    """CUDA_VISIBLE_DEVICES='3,0' makes CUDA 0 the fourth NVML device and CUDA 1 the first."""
    localities = gpu_localities(
        sysfs_root=sysfs_tree(online="0-15"),
        cuda_visible_devices="3,0",
        cuda_device_order="PCI_BUS_ID",
        nvml=four_gpus,
    )
    assert _buses(localities) == ["0000:ba:00.0", "0000:1b:00.0"]
    assert _nodes(localities) == [1, 0]


def test_visible_uuids_are_exact_even_for_mixed_models(sysfs_tree: TreeBuilder, four_gpus: Any) -> None:
    """UUID entries (also unique prefixes, any case) map exactly, whatever CUDA_DEVICE_ORDER is."""
    four_gpus.gpus[0].name = "NVIDIA A100"  # mixed models: index entries alone could not be trusted
    localities = gpu_localities(
        sysfs_root=sysfs_tree(online="0-15"),
        cuda_visible_devices="GPU-CCCC2222, gpu-aaaa0000-0000",
        cuda_device_order=None,
        nvml=four_gpus,
    )
    assert _buses(localities) == ["0000:9a:00.0", "0000:1b:00.0"]
    assert _nodes(localities) == [1, 0]


def test_fastest_first_with_identical_gpus_assumes_pci_order(sysfs_tree: TreeBuilder, four_gpus: Any) -> None:
    """Under the default order, identical GPUs are taken in PCI order (the documented assumption)."""
    localities = gpu_localities(
        sysfs_root=sysfs_tree(online="0-15"), cuda_visible_devices="1", cuda_device_order=None, nvml=four_gpus
    )
    assert _buses(localities) == ["0000:3b:00.0"]


def test_fastest_first_with_mixed_gpus_is_unknown(sysfs_tree: TreeBuilder, four_gpus: Any) -> None:
    """Under the default order with mixed models, index entries get unknown locality, never a guess."""
    four_gpus.gpus[2].name = "NVIDIA A100"
    for visible in (None, "0,2"):
        localities = gpu_localities(
            sysfs_root=sysfs_tree(online="0-15"),
            cuda_visible_devices=visible,
            cuda_device_order="FASTEST_FIRST",
            nvml=four_gpus,
        )
        assert len(localities) == (4 if visible is None else 2)
        assert all(
            gpu.numa_node is None and gpu.pci_bus_id is None and gpu.source == "unknown" for gpu in localities
        )


@pytest.mark.parametrize(
    ("visible", "count"),
    [("-1", 0), ("", 0), ("0,7,1", 1), ("1,1,2", 1), ("GPU-ffff", 0), ("2,junk,0", 1), ("MIG-1234,0", 2)],
)
def test_visible_list_stops_at_first_invalid_entry(
    sysfs_tree: TreeBuilder, four_gpus: Any, visible: str, count: int
) -> None:
    """As in CUDA, parsing stops at an entry naming no (or a repeated) device; MIG entries are unknown."""
    localities = gpu_localities(
        sysfs_root=sysfs_tree(online="0-15"),
        cuda_visible_devices=visible,
        cuda_device_order="PCI_BUS_ID",
        nvml=four_gpus,
    )
    assert len(localities) == count
    if visible.startswith("MIG"):
        assert localities[0].source == "unknown"
        assert localities[1].pci_bus_id == "0000:1b:00.0"


def test_sysfs_fallback_when_nvml_has_no_node(sysfs_tree: TreeBuilder, four_gpus: Any) -> None:
    """Where NVML cannot say, numa_node and local_cpulist come from sysfs under the normalised bus id."""
    for gpu in four_gpus.gpus:
        gpu.numa_node = None
        gpu.affinity_masks = None
    root = sysfs_tree(
        online="0-15",
        pci={"0000:1b:00.0": ("0", "0-7"), "0000:3b:00.0": ("1", "8-15"), "0000:9a:00.0": ("-1", "0-15")},
    )
    localities = gpu_localities(
        sysfs_root=root, cuda_visible_devices=None, cuda_device_order="PCI_BUS_ID", nvml=four_gpus
    )
    assert _nodes(localities) == [0, 1, None, None]
    assert [gpu.source for gpu in localities] == ["sysfs", "sysfs", "unknown", "unknown"]
    assert [gpu.local_cpus for gpu in localities] == [
        tuple(range(8)),
        tuple(range(8, 16)),
        tuple(range(16)),
        None,
    ]


def test_negative_nvml_node_is_unknown(sysfs_tree: TreeBuilder, four_gpus: Any) -> None:
    """-1 from NVML and -1 from sysfs both mean unknown: numa_node None, source 'unknown'."""
    four_gpus.gpus[0].numa_node = -1
    root = sysfs_tree(online="0-15", pci={"0000:1b:00.0": ("-1", "0-15")})
    (gpu, *_) = gpu_localities(
        sysfs_root=root, cuda_visible_devices="0", cuda_device_order="PCI_BUS_ID", nvml=four_gpus
    )
    assert (gpu.numa_node, gpu.source) == (None, "unknown")


def test_caller_bus_ids_need_no_nvml(sysfs_tree: TreeBuilder) -> None:
    """Given the CUDA devices' bus ids, locality comes from sysfs alone (NVML absent or not matching)."""
    root = sysfs_tree(online="0-15", pci={"0000:3b:00.0": ("1", "8-15"), "0000:1b:00.0": ("0", "0-7")})
    localities = gpu_localities(sysfs_root=root, cuda_pci_bus_ids=["00000000:3B:00.0", "0000:1b:00.0"])
    assert _nodes(localities) == [1, 0]
    assert localities[0].local_cpus == tuple(range(8, 16))


def test_caller_bus_ids_match_nvml(sysfs_tree: TreeBuilder, four_gpus: Any) -> None:
    """Given bus ids and NVML, each CUDA device is matched to the NVML device with that bus id."""
    localities = gpu_localities(
        sysfs_root=sysfs_tree(online="0-15"), cuda_pci_bus_ids=["0000:ba:00.0"], nvml=four_gpus
    )
    assert (localities[0].numa_node, localities[0].source) == (1, "nvml")
    assert four_gpus.calls == ["numa_node(3)"]


def test_hidden_gpus_give_empty_tuple_without_raising() -> None:
    """CUDA_VISIBLE_DEVICES=-1 yields no GPUs, with or without a driver, and never raises."""
    assert gpu_localities(cuda_visible_devices="-1") == ()


@pytest.mark.gpu
def test_real_gpus_match_torch() -> None:
    """On a CUDA host, every visible device is found, and its bus id matches torch's device properties."""
    torch = pytest.importorskip("torch")  # not a dependency of numa-bind: only this cross-check uses it

    localities = gpu_localities()
    assert len(localities) == torch.cuda.device_count()
    for gpu in localities:
        props = torch.cuda.get_device_properties(gpu.cuda_index)
        expected = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        assert gpu.pci_bus_id in (expected, None)
    exact = gpu_localities(
        cuda_pci_bus_ids=[
            f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
            for p in map(torch.cuda.get_device_properties, range(torch.cuda.device_count()))
        ]
    )
    if all(gpu.pci_bus_id is not None for gpu in localities):
        assert [gpu.numa_node for gpu in exact] == [gpu.numa_node for gpu in localities]
