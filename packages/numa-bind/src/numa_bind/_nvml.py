"""The narrow slice of NVML that locality discovery needs, and its pynvml adapter.

pynvml (package ``nvidia-ml-py``) is optional and imported lazily: without it, or without a
driver, ``open_pynvml`` yields None and discovery reports no GPUs.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any, Protocol

__all__ = ["NvmlProvider", "cpus_from_masks", "open_pynvml"]

_LOG = logging.getLogger(__name__)


class NvmlProvider(Protocol):
    """What GPU locality discovery asks of NVML. Indices are NVML indices (PCI bus order).

    Implementations return None for a query the platform does not support; they do not raise.
    """

    def device_count(self) -> int:
        """The number of GPUs NVML sees (ignores ``CUDA_VISIBLE_DEVICES``)."""
        ...

    def name(self, index: int) -> str | None:
        """The device's product name, e.g. ``"NVIDIA H200"``."""
        ...

    def uuid(self, index: int) -> str | None:
        """The device UUID, ``"GPU-xxxxxxxx-..."`` (the form ``CUDA_VISIBLE_DEVICES`` accepts)."""
        ...

    def pci_bus_id(self, index: int) -> str | None:
        """The PCI address as NVML writes it, e.g. ``"00000000:3B:00.0"``."""
        ...

    def numa_node(self, index: int) -> int | None:
        """The device's NUMA node; None where unsupported (negative values mean unknown too)."""
        ...

    def local_cpus(self, index: int) -> tuple[int, ...] | None:
        """The CPUs NVML reports as local to the device (its CPU-affinity mask)."""
        ...


def cpus_from_masks(masks: Sequence[int]) -> tuple[int, ...]:
    """Turn NVML's CPU-affinity words (64 CPUs each, word 0 = CPUs 0..63) into CPU ids."""
    return tuple(
        word_index * 64 + bit for word_index, word in enumerate(masks) for bit in range(64) if word >> bit & 1
    )


def _text(value: object) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


class _Pynvml:
    """``NvmlProvider`` over an initialised pynvml module."""

    def __init__(self, module: ModuleType) -> None:
        self._nvml = module
        self._handles: dict[int, Any] = {}

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._nvml.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def _query(self, what: str, index: int, *args: object) -> Any:
        try:
            return getattr(self._nvml, what)(self._handle(index), *args)
        except self._nvml.NVMLError as exc:
            _LOG.debug("NVML %s(device %d) failed: %s", what, index, exc)
            return None

    def device_count(self) -> int:
        return int(self._nvml.nvmlDeviceGetCount())

    def name(self, index: int) -> str | None:
        return _text(self._query("nvmlDeviceGetName", index))

    def uuid(self, index: int) -> str | None:
        return _text(self._query("nvmlDeviceGetUUID", index))

    def pci_bus_id(self, index: int) -> str | None:
        info = self._query("nvmlDeviceGetPciInfo", index)
        return None if info is None else _text(info.busId)

    def numa_node(self, index: int) -> int | None:
        if not hasattr(self._nvml, "nvmlDeviceGetNumaNodeId"):
            return None
        node = self._query("nvmlDeviceGetNumaNodeId", index)
        return None if node is None or int(node) < 0 else int(node)

    def local_cpus(self, index: int) -> tuple[int, ...] | None:
        words = ((os.cpu_count() or 1) + 63) // 64
        masks = self._query("nvmlDeviceGetCpuAffinity", index, words)
        return None if masks is None else cpus_from_masks([int(word) for word in masks])


@contextlib.contextmanager
def open_pynvml() -> Iterator[NvmlProvider | None]:
    """Initialise NVML through pynvml for the duration of the block.

    Yields:
        A provider, or None when pynvml is not installed or NVML cannot start (no driver,
        no GPU). Never raises for either.
    """
    try:
        import pynvml
    except ImportError:
        _LOG.debug("pynvml is not installed: no NVML GPU locality")
        yield None
        return
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        _LOG.debug("NVML is unavailable (%s): no NVML GPU locality", exc)
        yield None
        return
    try:
        yield _Pynvml(pynvml)
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
