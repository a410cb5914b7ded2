"""The architecture check behind ``Note [Ring memory ordering]`` (see ``_host_ring``)."""

from __future__ import annotations

import platform

from shm_transport.exceptions import UnsupportedPlatformError

__all__ = ["check_store_order_platform"]

# x86-64 under its many names. Only these give the TSO ordering the cursor protocol relies on.
_TSO_MACHINES = frozenset({"x86_64", "amd64", "x64"})


def check_store_order_platform(what: str) -> None:
    """Raise unless this CPU keeps stores and loads in program order (x86-64 TSO).

    Args:
        what: the object being created or attached, named in the error.

    Raises:
        UnsupportedPlatformError: on any architecture other than x86-64.
    """
    machine = platform.machine().lower()
    if machine not in _TSO_MACHINES:
        raise UnsupportedPlatformError(
            f"{what}: platform.machine()={platform.machine()!r} is not x86-64. The lock-free cursors "
            "rely on x86-64 store ordering (Note [Ring memory ordering] in shm_transport._host_ring) "
            "and Python offers no release/acquire fences; run the transport on an x86-64 host, or use "
            "a lock-based queue (multiprocessing.Queue) on this machine."
        )
