"""shm-transport: lock-free SPSC transition rings, a seqlock weight channel and a startup handshake.

Host shared memory everywhere (x86-64, Linux), CUDA IPC where the consumer and the producer share a
GPU. torch and numpy only. Callers define their own slots (``RingLayout``); the package knows no field
names. See the package README for a two-process example and ``wiki/transport.md`` in the fastsac
repository for the protocols.
"""

from shm_transport._cleanup import SegmentInfo, cleanup_stale_segments, list_segments
from shm_transport._cursors import RingCursors, RingCursorsHandle
from shm_transport._handshake import StartupHandshake
from shm_transport._host_ring import HostRing, HostRingHandle
from shm_transport._host_weights import HostWeightReader, HostWeightWriter
from shm_transport._ipc_probe import cuda_ipc_available
from shm_transport._ipc_ring import CudaIpcProducerHandle, CudaIpcRing
from shm_transport._ipc_weights import CudaIpcWeightHandle, CudaIpcWeightReader, CudaIpcWeightWriter
from shm_transport._layout import FieldSpec, RingLayout
from shm_transport._protocol import (
    RingProducerHandle,
    TransitionRing,
    WeightReader,
    WeightReaderHandle,
    WeightWriter,
)
from shm_transport._segment import default_prefix
from shm_transport._weight_channel import WeightChannel, WeightChannelHandle
from shm_transport.exceptions import CudaIpcUnavailable, HandshakeAborted, ShmTransportError

__all__ = [  # noqa: RUF022 (grouped by topic, not sorted)
    # slot layouts
    "FieldSpec",
    "RingLayout",
    # transition rings
    "TransitionRing",
    "RingProducerHandle",
    "HostRing",
    "HostRingHandle",
    "CudaIpcRing",
    "CudaIpcProducerHandle",
    "RingCursors",
    "RingCursorsHandle",
    "cuda_ipc_available",
    # weight channel
    "WeightWriter",
    "WeightReader",
    "WeightReaderHandle",
    "WeightChannel",
    "WeightChannelHandle",
    "HostWeightWriter",
    "HostWeightReader",
    "CudaIpcWeightWriter",
    "CudaIpcWeightReader",
    "CudaIpcWeightHandle",
    # startup handshake
    "StartupHandshake",
    # segment housekeeping
    "cleanup_stale_segments",
    "list_segments",
    "SegmentInfo",
    "default_prefix",
    # errors (every error class is in shm_transport.exceptions)
    "ShmTransportError",
    "CudaIpcUnavailable",
    "HandshakeAborted",
]
