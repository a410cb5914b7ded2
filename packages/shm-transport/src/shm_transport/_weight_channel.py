"""``WeightChannel``: the shared segment of a seqlock weight channel (learner -> one collector).

# Note [Weight channel seqlock]

The segment holds a sequence number ``seq`` (header counter A) and two slots, each a flat float32
parameter vector plus named extras (normalizer mean/std/count, ...). Version ``v`` lives in slot
``v % 2``; ``v = seq // 2``; version 0 means "nothing published yet".

Writer (one per channel), ``publish``:
  1. prepare a host copy of the source (pinned staging + D2H + synchronise for CUDA sources) while
     ``seq`` is still even, so readers keep loading the previous version during that time;
  2. ``seq = prev + 1`` (odd: a write is in progress);
  3. copy into slot ``(prev // 2 + 1) % 2``, the slot readers are *not* loading;
  4. ``seq = prev + 2`` (even: version ``prev // 2 + 1`` is complete).

Reader, ``poll`` (never waits):
  1. ``s1 = seq``; odd -> return None ("keep the current weights"); ``s1 // 2 <= loaded`` -> None;
  2. copy slot ``(s1 // 2) % 2`` into a private staging buffer;
  3. ``s2 = seq``; if ``s2 >= s1 + 3`` the writer started writing version ``v + 2``, which goes to the
     very slot being copied: discard and retry, at most ``max_retries`` times, then return None. A
     write of ``v + 1`` during the copy (``s2`` is ``s1 + 1`` or ``s1 + 2``) fills the *other* slot
     and is harmless: that is what the second slot is for, and it keeps a reader from being starved
     by a writer that publishes back to back;
  4. copy the staging buffer into the caller's tensors: a torn snapshot never reaches them.

Ordering: the same x86-64 facts as Note [Ring memory ordering] (``_host_ring``): ``seq`` has one
writer, its 8-byte stores and loads are atomic, the writer's stores (odd seq, slot data, even seq)
become visible in program order, and the reader's loads (s1, slot data, s2) happen in program order.
If any load in step 2 saw a byte of a later write *to that slot* (version ``v + 2`` or later), the
odd ``seq = 2v + 3`` store that preceded that write is visible to the later load of ``s2``, so
``s2 >= s1 + 3``. (The CUDA-IPC reader loads ``s2`` after its device copy has completed, and the
writer enqueues its copy of ``v + 2`` only after storing ``2v + 3``: the same argument holds.)
A writer that died between 2 and 4 leaves ``seq`` odd; the next writer restarts from ``prev = seq & ~1``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn

from torch import Tensor

from shm_transport._host_weights import HostWeightReader
from shm_transport._layout import FieldSpec, RingLayout, align_up
from shm_transport._platform import check_store_order_platform
from shm_transport._segment import COUNTER_A, HEADER_NBYTES, KIND_WEIGHTS, Segment
from shm_transport._seqlock import PARAMS_DTYPE
from shm_transport.exceptions import RingLayoutError, SegmentError

__all__ = ["WeightChannel", "WeightChannelHandle"]


@dataclass(frozen=True)
class WeightChannelHandle:
    """Picklable handle of a ``WeightChannel``: name and sizes, never contents."""

    name: str
    """Segment name in /dev/shm."""
    num_params: int
    """Length of the flat float32 parameter vector."""
    extras: tuple[tuple[str, FieldSpec], ...]
    """Named extra tensors published with the parameters (full shapes)."""
    host_slots: bool
    """Whether the segment holds the two host slots (False: sequence number only, for CUDA IPC)."""

    def open_reader(self) -> HostWeightReader:
        """Attach the channel and read its host slots; the reader's ``close()`` closes the channel.

        Raises:
            SegmentError: The channel has no host slots (its reader opens a ``CudaIpcWeightHandle``).
        """
        if not self.host_slots:
            raise SegmentError(f"weight channel {self.name!r} has no host slots; open its CUDA-IPC handle")
        return HostWeightReader(WeightChannel.attach(self), close_channel=True)


def _fingerprint(num_params: int, extras: tuple[tuple[str, FieldSpec], ...], host_slots: bool) -> int:
    fields = (("params", FieldSpec((num_params,), PARAMS_DTYPE)), *extras)
    return RingLayout(1, fields).fingerprint() ^ int(host_slots)


def _slot_nbytes(num_params: int, extras: tuple[tuple[str, FieldSpec], ...]) -> int:
    return align_up(num_params * 4) + sum(align_up(spec.numel * spec.itemsize) for _, spec in extras)


class WeightChannel:
    """Shared memory of one weight channel: the seqlock ``seq`` and (for the host variant) two slots.

    Created by the parent (``create``), attached in the learner and the collector (``attach``),
    closed everywhere, unlinked once by the parent. Use it through ``HostWeightWriter`` /
    ``HostWeightReader`` (or the CUDA-IPC pair, which needs ``host_slots=False`` only).
    """

    def __init__(self, segment: Segment, handle: WeightChannelHandle) -> None:
        self._segment = segment
        self._handle = handle
        self._words: memoryview | None = segment.words
        self._slots: list[tuple[Tensor, dict[str, Tensor]]] = []
        if handle.host_slots:
            offset = HEADER_NBYTES
            for _ in range(2):
                params = segment.data[offset : offset + handle.num_params * 4].view(PARAMS_DTYPE)
                offset += align_up(handle.num_params * 4)
                extras: dict[str, Tensor] = {}
                for name, spec in handle.extras:
                    nbytes = spec.numel * spec.itemsize
                    extras[name] = segment.data[offset : offset + nbytes].view(spec.dtype).view(spec.shape)
                    offset += align_up(nbytes)
                self._slots.append((params, extras))

    @classmethod
    def create(
        cls, num_params: int, extras: Mapping[str, FieldSpec], *, host_slots: bool = True
    ) -> WeightChannel:
        """Create a channel in the parent process.

        Args:
            num_params: length of the flat float32 parameter vector.
            extras: extra tensors published with the parameters, e.g. ``{"obs_mean": FieldSpec((17,),
                torch.float32), "obs_count": FieldSpec((), torch.int64)}``.
            host_slots: False allocates only the sequence number (for ``CudaIpcWeightWriter``).
        """
        check_store_order_platform("WeightChannel.create")
        if num_params < 1:
            raise RingLayoutError(f"WeightChannel num_params={num_params} must be >= 1")
        not_specs = {name: spec for name, spec in extras.items() if not isinstance(spec, FieldSpec)}
        if not_specs:
            raise RingLayoutError(
                f"WeightChannel extras {not_specs} are not FieldSpecs; give each as FieldSpec(shape, dtype), "
                "e.g. {'obs_mean': FieldSpec((17,), torch.float32)}"
            )
        handle_extras = tuple((name, spec) for name, spec in extras.items())
        nbytes = HEADER_NBYTES + (2 * _slot_nbytes(num_params, handle_extras) if host_slots else 0)
        segment = Segment.create(
            nbytes,
            kind=KIND_WEIGHTS,
            capacity=num_params,
            fingerprint=_fingerprint(num_params, handle_extras, host_slots),
            debug=False,
        )
        return cls(segment, WeightChannelHandle(segment.name, num_params, handle_extras, host_slots))

    @classmethod
    def attach(cls, handle: WeightChannelHandle) -> WeightChannel:
        """Attach in a worker process; ``close()`` when done."""
        check_store_order_platform("WeightChannel.attach")
        segment = Segment.attach(
            handle.name,
            kind=KIND_WEIGHTS,
            capacity=handle.num_params,
            fingerprint=_fingerprint(handle.num_params, handle.extras, handle.host_slots),
        )
        return cls(segment, handle)

    @property
    def handle(self) -> WeightChannelHandle:
        """Picklable handle for ``WeightChannel.attach``."""
        return self._handle

    @property
    def num_params(self) -> int:
        """Length of the flat parameter vector."""
        return self._handle.num_params

    @property
    def extras(self) -> dict[str, FieldSpec]:
        """Extra tensors' specs by name."""
        return dict(self._handle.extras)

    def _seq_words(self) -> memoryview:
        words = self._words
        if words is None:
            raise SegmentError(
                f"WeightChannel {self._segment.name!r} is closed in this process; attach it again"
            )
        return words

    def load_seq(self) -> int:
        """Load the sequence number (one aligned 8-byte load; Note [Weight channel seqlock])."""
        return int(self._seq_words()[COUNTER_A])

    def store_seq(self, value: int) -> None:
        """Store the sequence number (writer only)."""
        self._seq_words()[COUNTER_A] = value

    def slot(self, index: int) -> tuple[Tensor, dict[str, Tensor]]:
        """Views of host slot ``index`` (0 or 1): the flat parameters and the extras."""
        if not self._slots:
            self._seq_words()  # closed in this process: that is what to say
            raise SegmentError(
                f"WeightChannel {self._segment.name!r} has no host slots (host_slots=False); "
                "use the CUDA-IPC writer/reader with it"
            )
        return self._slots[index]

    def close(self) -> None:
        """Drop this process's mapping (idempotent)."""
        self._words = None
        self._slots = []
        self._segment.close()

    def unlink(self) -> None:
        """Remove the name (creator only)."""
        self._segment.unlink()

    def __reduce__(self) -> NoReturn:
        raise TypeError("a WeightChannel is not picklable: send channel.handle and call WeightChannel.attach")
