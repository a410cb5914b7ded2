"""The placement plan: frozen per-learner and per-collector records and the whole topology."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from numa_bind import format_cpulist

__all__ = ["CollectorPlacement", "LearnerPlacement", "TrainerTopology", "Transport"]

Transport = Literal["host", "cuda_ipc"]
"""How transitions or weights travel: host shared memory, or CUDA IPC on the learner's GPU."""


@dataclass(frozen=True, kw_only=True)
class LearnerPlacement:
    """Where one learner rank runs.

    Attributes:
        rank: The learner's rank, 0 .. num_learners-1.
        device: ``"cpu"`` or ``"cuda:N"``.
        numa_node: The node to bind memory and CPUs to (its GPU's local node), or None: not bound.
        cpus: The CPUs to pin the learner to, or None: not pinned.
    """

    rank: int
    device: str
    numa_node: int | None
    cpus: tuple[int, ...] | None


@dataclass(frozen=True, kw_only=True)
class CollectorPlacement:
    """Where one collector runs, what it steps and how it talks to its learner.

    Attributes:
        index: The collector's index, 0 .. num_collectors-1 (its seed offset).
        env_start: First env of its shard in the global batch.
        env_stop: One past the last env of its shard.
        owner_rank: The learner rank that drains this collector and publishes its weights.
        inference_device: Where the collector runs the policy: ``"cpu"`` or ``"cuda:N"``.
        numa_node: Its owner's NUMA node, or None: not bound.
        cpus: The CPUs to pin it to (shared with the other collectors of its node when
            ``cpus_per_collector`` is None), or None: not pinned.
        transition_transport: ``"cuda_ipc"`` ring on the owner's GPU, or ``"host"`` shared memory.
        weight_transport: ``"cuda_ipc"`` weight channel on the owner's GPU, or ``"host"``.
    """

    index: int
    env_start: int
    env_stop: int
    owner_rank: int
    inference_device: str
    numa_node: int | None
    cpus: tuple[int, ...] | None
    transition_transport: Transport
    weight_transport: Transport


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[col]) for row in [header, *rows]) for col in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def _node(node: int | None) -> str:
    return "-" if node is None else str(node)


def _cpus(cpus: tuple[int, ...] | None) -> str:
    return "-" if cpus is None else format_cpulist(cpus)


@dataclass(frozen=True, kw_only=True)
class TrainerTopology:
    """The resolved placement of every learner and collector.

    Attributes:
        learners: One placement per rank, by rank.
        collectors: One placement per collector, by index; shards are contiguous and ascending.
        notes: Human-readable reasons for choices the user may not expect (e.g. why an ``"on"``
            IPC request fell back to host memory, or why nothing is NUMA-bound).
    """

    learners: tuple[LearnerPlacement, ...]
    collectors: tuple[CollectorPlacement, ...]
    notes: tuple[str, ...] = ()

    @property
    def num_envs(self) -> int:
        """Envs in the global batch."""
        return self.collectors[-1].env_stop

    @property
    def num_envs_per_collector(self) -> int:
        """Envs each collector steps (every shard has the same width)."""
        return self.num_envs // len(self.collectors)

    def env_shards(self) -> tuple[tuple[int, int], ...]:
        """``(env_start, env_stop)`` of every collector, by index."""
        return tuple((collector.env_start, collector.env_stop) for collector in self.collectors)

    def collector_owner(self, index: int) -> int:
        """The learner rank that owns collector ``index``."""
        return self.collectors[index].owner_rank

    def collectors_of(self, rank: int) -> tuple[CollectorPlacement, ...]:
        """The collectors owned by learner ``rank``, ascending by index (a contiguous block)."""
        return tuple(collector for collector in self.collectors if collector.owner_rank == rank)

    def render(self) -> str:
        """A fixed-width table of learners, collectors and notes, for the trainer's start-up log."""
        lines = _table(
            ("rank", "device", "node", "cpus"),
            [(str(lr.rank), lr.device, _node(lr.numa_node), _cpus(lr.cpus)) for lr in self.learners],
        )
        lines.append("")
        lines += _table(
            ("collector", "envs", "owner", "inference", "node", "cpus", "transitions", "weights"),
            [
                (
                    str(c.index),
                    f"{c.env_start}-{c.env_stop - 1}",
                    str(c.owner_rank),
                    c.inference_device,
                    _node(c.numa_node),
                    _cpus(c.cpus),
                    c.transition_transport,
                    c.weight_transport,
                )
                for c in self.collectors
            ],
        )
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)
