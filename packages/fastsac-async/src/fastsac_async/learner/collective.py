"""The few collectives the learners' lockstep needs, behind a small protocol.

:class:`SoloCollective` serves a single learner, :class:`InProcessGroup` gives in-process fake
ranks (threads) for unit tests, and :class:`TorchCollective` is the torch.distributed one.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

import torch

__all__ = ["Collective", "InProcessGroup", "SoloCollective", "TorchCollective"]


class Collective(Protocol):
    """Integer all-reduce (sum) and a barrier across the learner ranks."""

    @property
    def rank(self) -> int:
        """This rank."""
        ...

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        ...

    def all_reduce_sum(self, values: Sequence[int]) -> list[int]:
        """Element-wise sum of ``values`` over every rank (every rank calls it with the same length)."""
        ...

    def barrier(self) -> None:
        """Wait for every rank."""
        ...


class SoloCollective:
    """The collective of a single learner: every reduction is the identity."""

    @property
    def rank(self) -> int:
        """Always 0."""
        return 0

    @property
    def world_size(self) -> int:
        """Always 1."""
        return 1

    def all_reduce_sum(self, values: Sequence[int]) -> list[int]:
        """Return ``values`` unchanged."""
        return list(values)

    def barrier(self) -> None:
        """Nothing to wait for."""


class InProcessGroup:
    """Fake ranks in one process (one thread per rank), for unit tests of the lockstep.

    Args:
        world_size: Number of ranks.
        timeout_s: Longest wait of a collective; a rank that never arrives breaks the barrier.
    """

    def __init__(self, world_size: int, timeout_s: float = 10.0) -> None:
        self._world_size = world_size
        self._timeout_s = timeout_s
        self._barrier = threading.Barrier(world_size)
        self._lock = threading.Lock()
        self._contrib: list[list[int]] = [[] for _ in range(world_size)]
        self._result: list[int] = []

    def member(self, rank: int) -> _InProcessMember:
        """The collective of rank ``rank``."""
        return _InProcessMember(self, rank)

    def _all_reduce(self, rank: int, values: Sequence[int]) -> list[int]:
        self._contrib[rank] = list(values)
        if self._barrier.wait(self._timeout_s) == 0:
            self._result = [sum(col) for col in zip(*self._contrib, strict=True)]
        self._barrier.wait(self._timeout_s)
        result = list(self._result)
        self._barrier.wait(self._timeout_s)
        return result

    def _wait(self) -> None:
        self._barrier.wait(self._timeout_s)


class _InProcessMember:
    def __init__(self, group: InProcessGroup, rank: int) -> None:
        self._group = group
        self._rank = rank

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._group._world_size

    def all_reduce_sum(self, values: Sequence[int]) -> list[int]:
        return self._group._all_reduce(self._rank, values)

    def barrier(self) -> None:
        self._group._wait()


class TorchCollective:
    """torch.distributed collectives on the default process group.

    Args:
        device: Device of the reduction buffer (``cuda:N`` under NCCL, ``cpu`` under gloo).
    """

    def __init__(self, device: torch.device) -> None:
        import torch.distributed as dist

        self._dist = dist
        self._device = device
        self._buf = torch.zeros(8, dtype=torch.int64, device=device)

    @property
    def rank(self) -> int:
        """This process's rank in the default group."""
        return int(self._dist.get_rank())

    @property
    def world_size(self) -> int:
        """Size of the default group."""
        return int(self._dist.get_world_size())

    def all_reduce_sum(self, values: Sequence[int]) -> list[int]:
        """Sum over the ranks (one small all-reduce; its ``.tolist()`` syncs, which the decision needs)."""
        n = len(values)
        if n > self._buf.numel():
            self._buf = torch.zeros(n, dtype=torch.int64, device=self._device)
        buf = self._buf[:n]
        buf.copy_(torch.tensor(list(values), dtype=torch.int64))
        self._dist.all_reduce(buf)
        return [int(v) for v in buf.tolist()]

    def barrier(self) -> None:
        """torch.distributed barrier."""
        self._dist.barrier()
