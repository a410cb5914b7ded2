"""The run's large allocations against this host's memory, before anything is created or spawned.

# Note [memory check]
A replay buffer or a ring that does not fit used to fail 30-40 s into the run, in a worker, with an
allocator's traceback. :func:`check_memory` runs before the run folder exists (``fastsac_trainer.training``)
and compares what the run will allocate with what is there:

* **host memory** (``psutil.virtual_memory().available``): the replay buffer of every CPU learner (the
  synchronous trainer's too) and every transition ring (``/dev/shm`` is memory);
* **/dev/shm** (its free space, ``os.statvfs``): the transition rings, one per collector;
* **each GPU** (its free memory as NVML reports it, asked only when a learner is on CUDA): the replay
  buffers of the learners on it. NVML, not ``torch.cuda.mem_get_info``: that would create a CUDA context
  in the parent for the whole run (about 0.5 GB of the learner's GPU, and under the EXCLUSIVE_PROCESS
  compute mode the learner could not create its own). A GPU whose free memory NVML cannot tell (no
  driver library, a MIG slice, an unknown PCI address) is not checked, with a log line.

The sizes come from the parts themselves, never re-derived here: a replay buffer is
``algo.agent.buffer_size`` steps of each of its envs, stored ``(capacity, num_envs, ...)`` per field
(Note [replay layout] in ``fastsac_core._replay``), so its bytes per env step are those of a real
``ReplayBuffer`` of one env and two steps, halved; a ring's are ``fastsac_async.transition_ring_bytes``.
Small allocations (networks, optimizers, pinned staging, the envs, and on a GPU the CUDA context of
each process that uses it: collectors with inference there, the compile warmer; about 0.5 GB each) are
not counted: a need above what there is is refused, and the value suggested instead fills at most
:data:`SUGGESTED_SHARE` of it, to leave them room. The refusal is one line: what does not fit, how
much it needs, how much there is, and which value of ``algo.agent.buffer_size``, ``task.num_envs`` or
``async_options.ring_capacity`` fits, the one given on the command line first.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from fastsac_trainer.config.exceptions import ConfigError

log = logging.getLogger(__name__)

__all__ = ["SUGGESTED_SHARE", "check_memory", "gpu_free_bytes", "replay_step_bytes"]

SUGGESTED_SHARE = 0.8
"""Share of what is there that a suggested value fills (the rest: processes, networks, envs)."""
_SHM = "/dev/shm"
_BUFFER = "algo.agent.buffer_size"
_ENVS = "task.num_envs"
_RING = "algo.trainer.async_options.ring_capacity"


def replay_step_bytes(dims: Any, agent: Any) -> int:
    """Bytes a replay buffer stores per env per step (Note [memory check]: from a real 1-env buffer)."""
    from fastsac_core import ReplayBuffer

    buffer = ReplayBuffer.of(dims, dataclasses.replace(agent, buffer_size=2), 1)
    return sum(t.nbytes for t in buffer.storage.values()) // 2


@dataclass
class _Place:
    """Where memory is taken: host memory, /dev/shm or a GPU, and what the run puts there."""

    name: str
    """``host memory``, ``/dev/shm``, ``cuda:0 memory``."""
    free: int
    """Bytes there are."""
    replay: int = 0
    """Bytes of replay buffers."""
    replay_envs: int = 0
    """Envs whose replay is here."""
    rings: int = 0
    """Bytes of transition rings."""

    @property
    def need(self) -> int:
        """Bytes the run puts here."""
        return self.replay + self.rings


def _size(nbytes: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} bytes"


def _round_down(value: float, multiple: int = 1) -> int:
    """``value`` rounded down to two significant digits, then to a multiple of ``multiple``."""
    if value < 1:
        return 0
    unit = 10 ** max(0, int(math.log10(value)) - 1)
    rounded = int(value // unit * unit)
    return rounded - rounded % multiple


def check_memory(run: Any, topology: Any, explicit: Collection[str] = ()) -> None:
    """Refuse a run whose replay buffers or rings do not fit this host (Note [memory check]).

    Args:
        run: The resolved run (``ResolvedRun``: dims, agent, num_envs, device, async options).
        topology: Its placement (``TrainerTopology``), None for the synchronous trainer.
        explicit: Keys given on the command line: the line names one of them first.

    Raises:
        ConfigError: Something does not fit; the message names the setting and the values that fit.
    """
    import psutil  # type: ignore[import-untyped]

    step = replay_step_bytes(run.dims, run.agent)
    host = _Place("host memory", psutil.virtual_memory().available)
    places = [host]
    envs_multiple = 1
    learners = [(run.device, run.num_envs)]
    if topology is not None:
        from fastsac_async import transition_ring_bytes

        learners = [(p.device, run.num_envs // len(topology.learners)) for p in topology.learners]
        envs_multiple = len(topology.collectors)
        capacity = run.async_options.ring_capacity
        ring = transition_ring_bytes(run.dims, topology.num_envs_per_collector, capacity)
        host.rings = len(topology.collectors) * ring
        stat = os.statvfs(_SHM)
        places.append(_Place(_SHM, stat.f_bavail * stat.f_frsize, rings=host.rings))
    gpus: dict[str, _Place] = {}
    for device, envs in learners:
        place = host
        if device != "cpu":
            if device not in gpus:
                free = gpu_free_bytes(device)
                if free is None:
                    log.info("memory check: the free memory of %s is unknown (NVML); not checked", device)
                    continue
                gpus[device] = _Place(f"{device} memory", free)
            place = gpus[device]
        place.replay += run.agent.buffer_size * envs * step
        place.replay_envs += envs
    for place in [*places, *gpus.values()]:
        if place.need > place.free:
            raise _refusal(run, place, explicit, envs_multiple)


def gpu_free_bytes(device: str) -> int | None:
    """Free memory of the CUDA device ``device`` (``cuda`` or ``cuda:N``) as NVML reports it; None: unknown.

    No CUDA context is created (Note [memory check]); CUDA's index is mapped to NVML's device through its
    PCI address (``numa_bind.gpu_localities``, which follows ``CUDA_VISIBLE_DEVICES``).
    """
    from numa_bind import gpu_localities

    index = int(device.partition(":")[2] or 0)
    bus_id = next((g.pci_bus_id for g in gpu_localities() if g.cuda_index == index), None)
    if bus_id is None:
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus_id.encode())
            return int(pynvml.nvmlDeviceGetMemoryInfo(handle).free)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no library, no driver, a device NVML will not answer for
        return None


def _refusal(run: Any, place: _Place, explicit: Collection[str], envs_multiple: int) -> ConfigError:
    """The one-line error for ``place``: the setting named first, the values that would fit."""
    capacity, ring_capacity = run.agent.buffer_size, run.async_options.ring_capacity
    values = {_BUFFER: capacity, _ENVS: run.num_envs, _RING: ring_capacity}
    room = SUGGESTED_SHARE * place.free
    # What sizes each part here: the buffer's capacity, the ring's, and (both) the envs; the largest
    # part's own setting first. Each part is linear in each of its settings.
    keys = [_BUFFER, _ENVS, _RING] if place.replay >= place.rings else [_RING, _ENVS, _BUFFER]
    fits = {_ENVS: _round_down(room * run.num_envs / place.need, envs_multiple)}
    if place.replay:
        fits[_BUFFER] = _round_down((room - place.rings) * capacity / place.replay)
    if place.rings:
        fits[_RING] = _round_down((room - place.replay) * ring_capacity / place.rings)
    keys = [key for key in keys if key in fits]
    named = next((key for key in keys if key in explicit), keys[0])
    least = {_BUFFER: 2, _ENVS: max(1, envs_multiple), _RING: 1}  # 2 steps: the smallest transition
    fixes = [
        f"{key}={fits[key]}" for key in sorted(keys, key=lambda k: k != named) if fits[key] >= least[key]
    ]
    parts = []
    if place.replay:
        parts.append(
            f"the replay buffer ({capacity} steps x {place.replay_envs} envs, {_size(place.replay)})"
        )
    if place.rings:
        parts.append(
            f"the transition rings ({ring_capacity} slots x {run.num_envs} envs, {_size(place.rings)})"
        )
    there = "free" if place.name == _SHM else "available"
    head = f"{place.name} cannot hold {' and '.join(parts)}"
    head += f": {_size(place.need)} needed, {_size(place.free)} {there}"
    fix = f"{' or '.join(fixes)} would fit" if fixes else "no value of these settings fits this host"
    return ConfigError(named, values[named], f"{head}; {fix}")
