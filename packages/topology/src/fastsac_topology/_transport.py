"""Transport choice per learner rank: CUDA-IPC or host memory, for transitions and for weights.

A rank uses CUDA IPC only when every one of its collectors infers on exactly the rank's own GPU
(all or nothing): then transitions are produced on that device and weights are consumed there.
``"off"`` is host; ``"auto"`` is IPC when possible (weights also need ``actor_param_bytes >=
weight_ipc_min_bytes``); ``"on"`` is IPC when possible, ignoring the size gate, and otherwise
host with a note stating why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from fastsac_topology._plan import Transport

__all__ = ["IpcMode", "choose_transports"]

IpcMode = Literal["auto", "on", "off"]
"""A user's IPC request."""


def _why_not(rank: int, device: str, collector_devices: Sequence[tuple[int, str]]) -> str | None:
    """Why rank ``rank`` cannot use CUDA IPC, or None when it can."""
    if device == "cpu":
        return f"rank {rank} learns on cpu"
    others = [f"{index} ({where})" for index, where in collector_devices if where != device]
    if others:
        return f"rank {rank}'s collector(s) {', '.join(others)} do not infer on its {device}"
    return None


def choose_transports(
    *,
    devices: Sequence[str],
    collector_devices: Sequence[str],
    owners: Sequence[int],
    transition_ipc: IpcMode,
    weight_ipc: IpcMode,
    weight_ipc_min_bytes: int,
    actor_param_bytes: int,
) -> tuple[list[tuple[Transport, Transport]], list[str]]:
    """The (transition, weight) transport of every rank, and notes for ``"on"`` requests that fell back."""
    chosen: list[tuple[Transport, Transport]] = []
    notes: list[str] = []
    big_enough = actor_param_bytes >= weight_ipc_min_bytes
    for rank, device in enumerate(devices):
        mine = [
            (index, where)
            for index, (where, owner) in enumerate(zip(collector_devices, owners, strict=True))
            if owner == rank
        ]
        reason = _why_not(rank, device, mine)
        transition: Transport = "cuda_ipc" if reason is None and transition_ipc != "off" else "host"
        weights_ok = reason is None and (weight_ipc == "on" or (weight_ipc == "auto" and big_enough))
        weight: Transport = "cuda_ipc" if weights_ok else "host"
        if transition_ipc == "on" and reason is not None:
            notes.append(f"transition_ipc='on' but {reason}: rank {rank} uses host rings")
        if weight_ipc == "on" and reason is not None:
            notes.append(f"weight_ipc='on' but {reason}: rank {rank} publishes weights through host memory")
        chosen.append((transition, weight))
    return chosen, notes
