"""Raw NUMA memory-policy syscalls through ctypes (no libnuma).

# Note [mempolicy syscall numbers]
Numbers from the kernel's tables (checked against ``arch/x86/entry/syscalls/syscall_64.tbl``
and ``include/uapi/asm-generic/unistd.h``; the x86-64 ones also by calling them on Linux):

    arch      mbind  get_mempolicy  set_mempolicy
    x86_64      237            239            238
    aarch64     235            236            237   (asm-generic table)

Any other architecture reports "unsupported" rather than guess. Node masks are arrays of C
``unsigned long``; like libnuma we pass ``maxnode = bits + 1`` because the kernel reads one bit
fewer than ``maxnode`` (a historical off-by-one kept for compatibility).
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import sys
from typing import NamedTuple

__all__ = [
    "MODES",
    "MODE_FLAGS",
    "MODE_NAMES",
    "MPOL_F_ADDR",
    "MPOL_F_MEMS_ALLOWED",
    "MPOL_F_NODE",
    "MempolicySyscalls",
    "syscalls",
]

MODES = {"default": 0, "preferred": 1, "bind": 2, "interleave": 3, "local": 4, "preferred_many": 5}
"""Memory-policy modes (``MPOL_*`` in ``include/uapi/linux/mempolicy.h``)."""
MODE_NAMES = {value: name for name, value in MODES.items()} | {6: "weighted_interleave"}
MPOL_F_NODE = 1 << 0
MPOL_F_ADDR = 1 << 1
MPOL_F_MEMS_ALLOWED = 1 << 2
MODE_FLAGS = (1 << 15) | (1 << 14) | (1 << 13)  # STATIC_NODES, RELATIVE_NODES, NUMA_BALANCING
_MASK_BITS = 1024  # MAX_NUMNODES is at most 1 << 10
_WORD_BITS = ctypes.sizeof(ctypes.c_ulong) * 8
_NUMBERS = {"x86_64": (237, 239, 238), "aarch64": (235, 236, 237)}

_NodeMask = ctypes.c_ulong * (_MASK_BITS // _WORD_BITS)


class MempolicySyscalls(NamedTuple):
    """The calls, bound to this machine's syscall numbers. Each raises ``OSError`` on failure."""

    number_mbind: int
    number_get: int
    number_set: int

    def set_mempolicy(self, mode: int, nodes: tuple[int, ...]) -> None:
        """``set_mempolicy(mode, nodes)`` for the calling thread (``nodes`` empty for default)."""
        mask = _mask(nodes)
        bits = ctypes.c_ulong(_MASK_BITS + 1 if nodes else 0)
        _check(_libc().syscall(self.number_set, ctypes.c_int(mode), mask if nodes else None, bits))

    def get_mempolicy(self, flags: int = 0, addr: int = 0) -> tuple[int, tuple[int, ...]]:
        """``get_mempolicy``: (raw mode with its mode flags, or the node id for ``MPOL_F_NODE``; nodes)."""
        mode = ctypes.c_int(-1)
        mask = _NodeMask()
        _check(
            _libc().syscall(
                self.number_get,
                ctypes.byref(mode),
                mask,
                ctypes.c_ulong(_MASK_BITS + 1),
                ctypes.c_void_p(addr or None),
                ctypes.c_ulong(flags),
            )
        )
        return mode.value, _nodes(mask)


def _mask(nodes: tuple[int, ...]) -> ctypes.Array[ctypes.c_ulong]:
    mask = _NodeMask()
    for node in nodes:
        mask[node // _WORD_BITS] |= 1 << (node % _WORD_BITS)
    return mask


def _nodes(mask: ctypes.Array[ctypes.c_ulong]) -> tuple[int, ...]:
    return tuple(
        index * _WORD_BITS + bit
        for index, word in enumerate(mask)
        for bit in range(_WORD_BITS)
        if word >> bit & 1
    )


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int) -> None:
    if result == -1:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def syscalls() -> MempolicySyscalls | None:
    """The memory-policy syscalls of this machine, or None off Linux or on an unlisted architecture."""
    if not sys.platform.startswith("linux"):
        return None
    numbers = _NUMBERS.get(platform.machine())
    return None if numbers is None else MempolicySyscalls(*numbers)
