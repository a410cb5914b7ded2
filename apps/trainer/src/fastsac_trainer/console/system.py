"""System health for the console: per-core CPU, RAM, and per-GPU utilisation and memory.

CPU and RAM come from psutil; GPUs from NVML (nvidia-ml-py), initialised lazily once. Without
a GPU, a driver or the NVML library the GPU list is simply empty.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import psutil  # type: ignore[import-untyped]

__all__ = ["GpuSample", "SystemSample", "SystemSampler"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class GpuSample:
    """One GPU at one moment."""

    index: int
    """NVML device index."""
    name: str
    """Marketing name (``NVIDIA H200``)."""
    util_pct: float
    """SM utilisation over the driver's last sample period, in percent."""
    mem_used_bytes: int
    """Device memory in use."""
    mem_total_bytes: int
    """Device memory in total."""


@dataclass(frozen=True, kw_only=True)
class SystemSample:
    """CPU, RAM and GPUs at one moment."""

    cpu_ids: tuple[int, ...]
    """Ids of the CPUs this process may run on (the labels of ``per_cpu_pct``)."""
    per_cpu_pct: tuple[float, ...]
    """Busy percent of each of those CPUs since the previous sample."""
    ram_used_bytes: int
    """Host memory in use."""
    ram_total_bytes: int
    """Host memory in total."""
    gpus: tuple[GpuSample, ...] = field(default_factory=tuple)
    """Every GPU NVML sees (empty without one)."""

    @property
    def cpu_pct(self) -> float:
        """Mean busy percent over the allowed CPUs."""
        return sum(self.per_cpu_pct) / len(self.per_cpu_pct) if self.per_cpu_pct else 0.0

    @property
    def ram_pct(self) -> float:
        """Host memory in use, in percent."""
        return 100.0 * self.ram_used_bytes / self.ram_total_bytes if self.ram_total_bytes else 0.0


class SystemSampler:
    """Takes :class:`SystemSample` s; CPU percentages are deltas between consecutive calls."""

    def __init__(self) -> None:
        self._cpu_ids = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
        self._nvml: Any = None
        self._nvml_tried = False
        psutil.cpu_percent(percpu=True)  # primes the delta; the first reading is otherwise 0.0

    def sample(self) -> SystemSample:
        """CPU since the previous call, RAM and GPUs now."""
        per_cpu = psutil.cpu_percent(percpu=True)
        ids = self._cpu_ids or tuple(range(len(per_cpu)))
        memory = psutil.virtual_memory()
        return SystemSample(
            cpu_ids=ids,
            per_cpu_pct=tuple(per_cpu[i] for i in ids if i < len(per_cpu)),
            ram_used_bytes=int(memory.total - memory.available),
            ram_total_bytes=int(memory.total),
            gpus=self._gpus(),
        )

    def _gpus(self) -> tuple[GpuSample, ...]:
        nvml = self._load_nvml()
        if nvml is None:
            return ()
        samples = []
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                name = nvml.nvmlDeviceGetName(handle)
                util = nvml.nvmlDeviceGetUtilizationRates(handle)
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                samples.append(
                    GpuSample(
                        index=index,
                        name=name.decode() if isinstance(name, bytes) else str(name),
                        util_pct=float(util.gpu),
                        mem_used_bytes=int(mem.used),
                        mem_total_bytes=int(mem.total),
                    )
                )
        except Exception as error:  # NVML errors are many types; the panel degrades, training goes on.
            _log.debug("NVML sample failed: %s", error)
            return ()
        return tuple(samples)

    def _load_nvml(self) -> Any:
        if self._nvml_tried:
            return self._nvml
        self._nvml_tried = True
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as error:  # no library, no driver, no device: no GPU section.
            _log.debug("NVML unavailable: %s", error)
            return None
        self._nvml = pynvml
        return pynvml

    def close(self) -> None:
        """Shut NVML down if it was started."""
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception as error:  # shutting down a half-dead driver must not fail the run.
                _log.debug("NVML shutdown failed: %s", error)
            self._nvml = None
