"""Whether CUDA IPC can carry ring slots or weights on a device, and why not."""

from __future__ import annotations

import contextlib
import os

import torch

from shm_transport.exceptions import CudaIpcUnavailable

__all__ = ["cuda_ipc_available", "require_cuda_ipc"]

_ALLOC_CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def cuda_ipc_available(device: torch.device | str | int) -> tuple[bool, str]:
    """Probe CUDA IPC on ``device``: ``(True, "ok")`` or ``(False, reason)``.

    Checks, in order: expandable segments are off (their IPC import needs ``pidfd_getfd``
    permissions that containers often deny, pytorch#165685); a CUDA device is visible; exporting an
    IPC handle of a fresh allocation works (it fails on some virtualised GPUs, RL2#14).
    """
    for var in _ALLOC_CONF_VARS:
        conf = os.environ.get(var, "")
        if "expandable_segments:true" in conf.replace(" ", "").lower():
            return False, (
                f"{var}={conf!r} enables expandable segments, which CUDA IPC cannot share reliably; "
                "unset expandable_segments to use CUDA-IPC transport"
            )
    if not torch.cuda.is_available():
        return False, "torch.cuda.is_available() is False (no CUDA device or driver)"
    try:
        dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
        probe = torch.zeros(1, device=dev)
        shared = probe.untyped_storage()._share_cuda_()  # type: ignore[no-untyped-call]
    except (RuntimeError, AssertionError, ValueError) as error:
        return False, f"exporting a CUDA IPC handle on {device!r} failed: {error}"
    _release_unreceived(shared)
    return True, "ok"


def _release_unreceived(shared: tuple[object, ...]) -> None:
    """Drop the reference count an export takes on behalf of a receiver that will never come.

    Until every receiver releases it, torch keeps an exported block alive and, at exit, logs "Producer
    process has been terminated before all shared CUDA tensors released" for it. The probe is never
    received, so it releases its own count the way a receiver does (``torch.multiprocessing``'s
    ``rebuild_cuda_tensor``). Best effort: if this private API changes, only that warning comes back.
    """
    ref_counter_handle, ref_counter_offset = shared[4], shared[5]
    release = getattr(torch.UntypedStorage, "_release_ipc_counter_cuda", None)
    if release is not None:
        with contextlib.suppress(RuntimeError, TypeError):
            release(ref_counter_handle, ref_counter_offset)


def require_cuda_ipc(device: torch.device | str | int, what: str) -> None:
    """Raise ``CudaIpcUnavailable`` naming ``what`` and the reason unless the probe passes."""
    ok, reason = cuda_ipc_available(device)
    if not ok:
        raise CudaIpcUnavailable(
            f"{what}: CUDA IPC is unavailable on {device!r}: {reason}; use the host transport"
        )
