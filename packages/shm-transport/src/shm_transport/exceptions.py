"""Errors raised by shm-transport.

Every message names the setting or object involved, the value seen, and what to do about it.
"""

from __future__ import annotations

__all__ = [
    "CudaIpcUnavailable",
    "HandshakeAborted",
    "HandshakeError",
    "HandshakeTimeout",
    "RingLayoutError",
    "SegmentError",
    "ShmTransportError",
    "UnsupportedPlatformError",
    "UnwrittenSlotError",
]


class ShmTransportError(Exception):
    """Base class of every error raised by shm-transport."""


class UnsupportedPlatformError(ShmTransportError):
    """The CPU architecture does not give the store/load ordering the cursors rely on.

    See ``Note [Ring memory ordering]`` in ``shm_transport._host_ring``.
    """


class RingLayoutError(ShmTransportError, ValueError):
    """A ring layout, capacity or pushed tensor does not fit what the ring was built for."""


class SegmentError(ShmTransportError):
    """A shared-memory segment is missing, has the wrong header, or was already closed."""


class UnwrittenSlotError(ShmTransportError):
    """Debug mode found a slot whose rows still hold the sentinels of a never-written slot."""


class CudaIpcUnavailable(ShmTransportError, RuntimeError):  # noqa: N818 (name fixed by the API)
    """CUDA IPC cannot be used here; the message says why. Fall back to the host ring."""


class HandshakeError(ShmTransportError):
    """The startup handshake was used against its protocol (unknown name, second message, ...)."""


class HandshakeTimeout(HandshakeError, TimeoutError):  # noqa: N818 (name fixed by the API)
    """A bounded handshake wait expired; the message names every worker that did not arrive."""


class HandshakeAborted(HandshakeError):  # noqa: N818 (name fixed by the API)
    """A handshake wait returned early because ``should_stop()`` turned true."""
