"""Worker statistics: stage timing as running means, snapshots, and their aggregation.

Workers send snapshots to the parent on bounded multiprocessing queues with :func:`offer`, which
drops a snapshot when the queue is full rather than ever blocking a worker.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "COLLECTOR_STAGES",
    "LEARNER_STAGES",
    "CollectorSnapshot",
    "CollectorSummary",
    "LearnerSnapshot",
    "StageTimer",
    "aggregate_collectors",
    "offer",
]

COLLECTOR_STAGES = ("env_step", "inference", "push", "weight_sync", "wait")
"""First-level stages of a collector step."""
LEARNER_STAGES = ("drain", "decide", "update", "publish", "checkpoint", "idle")
"""First-level stages of a learner loop."""


class StageTimer:
    """Running means (ms) and totals (s) of named stages; each worker owns one.

    Args:
        stages: Stage names, in display order.
    """

    def __init__(self, stages: Sequence[str]) -> None:
        self._total = dict.fromkeys(stages, 0.0)
        self._count = dict.fromkeys(stages, 0)

    def add(self, stage: str, seconds: float) -> None:
        """Record one occurrence of ``stage`` lasting ``seconds``."""
        self._total[stage] += seconds
        self._count[stage] += 1

    @contextmanager
    def time(self, stage: str) -> Iterator[None]:
        """Time the ``with`` body as one occurrence of ``stage``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(stage, time.perf_counter() - start)

    def total_s(self, stage: str) -> float:
        """Seconds spent in ``stage`` since the last reset."""
        return self._total[stage]

    def shares_pct(self, wall_s: float) -> dict[str, float]:
        """Percent of ``wall_s`` spent in each stage since the last reset, and ``other`` for the rest.

        Every stage is present (0.0 when it did not occur), so a series of shares has a point at every
        report instead of gaps that a plot would bridge with a stale value.
        """
        shares = {k: 100.0 * t / wall_s for k, t in self._total.items()}
        shares["other"] = max(0.0, 100.0 - sum(shares.values()))
        return shares

    def means_ms(self) -> dict[str, float]:
        """Mean milliseconds per occurrence of each stage seen since the last reset."""
        return {k: 1e3 * self._total[k] / n for k, n in self._count.items() if n}

    def reset(self) -> None:
        """Start a new window."""
        for k in self._total:
            self._total[k] = 0.0
            self._count[k] = 0


@dataclass(frozen=True, kw_only=True)
class CollectorSnapshot:
    """What one collector reports (picklable, small)."""

    index: int
    """Collector index."""
    steps: int
    """Its env steps (batches of its shard) so far."""
    steps_per_s: float
    """Its batches per second over the last window."""
    num_envs: int
    """Envs of its shard."""
    episodes: int
    """Episodes finished in the last window."""
    mean_return: float | None
    """Mean return of its last (up to 100) episodes, None before the first ends."""
    mean_ep_len: float | None
    """Mean length of the same episodes."""
    weight_version: int
    """Weight version it acts with."""
    policy_lag: int
    """Versions published and not yet loaded when it last polled."""
    ring_fill: int
    """Slots of its ring in use."""
    timing_ms: dict[str, float] = field(default_factory=dict)
    """Stage -> mean ms per occurrence (COLLECTOR_STAGES): per step for ``env_step``, ``inference``
    and ``push``, per poll for ``weight_sync``, per back-off sleep for ``wait``."""
    time_pct: dict[str, float] = field(default_factory=dict)
    """Stage -> percent of the window's wall time, plus ``other``; ``wait`` is the back-pressure share
    (time spent because the ring was full, i.e. the learner was behind)."""


@dataclass(frozen=True, kw_only=True)
class LearnerSnapshot:
    """What one learner rank reports."""

    rank: int
    """Learner rank."""
    global_step: int
    """Full batches seen (gstep)."""
    updates: int
    """Updates run so far."""
    updates_per_s: float
    """Updates per second over the last window."""
    learn_pct: float
    """Percent of the window's wall time spent in updates."""
    buffer_size: int
    """Transitions in its replay buffer."""
    timing_ms: dict[str, float] = field(default_factory=dict)
    """Stage -> mean ms per occurrence (LEARNER_STAGES)."""
    host_pct: dict[str, float] = field(default_factory=dict)
    """Stage -> percent of the window's wall time the learner's host thread spent in it, plus ``other``
    (the rest: progress counters, stats); where a host-bound learner's time goes."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Latest update metrics (``qf_loss``, ``actor_loss``, ...); rank 0 only."""
    checkpoint: str | None = None
    """Path of a checkpoint written since the last snapshot (rank 0 only)."""
    compiled: bool = False
    """The updates run the compiled steps (after a background compile's switch: Note [Compile in the
    background] in ``fastsac_core._background_compile``)."""


@dataclass(frozen=True, kw_only=True)
class CollectorSummary:
    """Collectors' latest snapshots, aggregated."""

    mean_return: float | None
    """Mean of the collectors' mean returns (weighted by shard size), None if none ended yet."""
    mean_ep_len: float | None
    """Same for episode lengths."""
    episodes: int
    """Episodes summed over collectors (last window)."""
    steps_per_s: float
    """Env transitions per second summed over collectors."""
    max_policy_lag: int
    """Largest policy lag."""
    ring_fill: int
    """Ring slots in use, summed."""
    weight_version: int
    """Highest weight version loaded by a collector."""
    per_collector: dict[str, float]
    """Per-collector columns: ``policy_lag_collector{i}``, ``ring_fill_collector{i}``, ..."""
    timing_ms: dict[str, float]
    """Stage -> mean ms over the collectors that reported it."""
    time_pct: dict[str, float] = field(default_factory=dict)
    """Stage -> mean percent of wall time over the collectors that reported it."""


def aggregate_collectors(snapshots: Sequence[CollectorSnapshot]) -> CollectorSummary:
    """Aggregate the latest snapshot of each collector (missing collectors are simply absent)."""
    with_return = [s for s in snapshots if s.mean_return is not None]
    weight = sum(s.num_envs for s in with_return)

    def weighted(values: list[float]) -> float | None:
        if not with_return or weight == 0:
            return None
        return sum(v * s.num_envs for v, s in zip(values, with_return, strict=True)) / weight

    per: dict[str, float] = {}
    for s in snapshots:
        per[f"policy_lag_collector{s.index}"] = float(s.policy_lag)
        per[f"ring_fill_collector{s.index}"] = float(s.ring_fill)
        per[f"env_steps_per_s_collector{s.index}"] = s.steps_per_s * s.num_envs
    stages: dict[str, list[float]] = {}
    shares: dict[str, list[float]] = {}
    for s in snapshots:
        for k, v in s.timing_ms.items():
            stages.setdefault(k, []).append(v)
        for k, v in s.time_pct.items():
            shares.setdefault(k, []).append(v)
    return CollectorSummary(
        mean_return=weighted([s.mean_return for s in with_return if s.mean_return is not None]),
        mean_ep_len=weighted([s.mean_ep_len or 0.0 for s in with_return]),
        episodes=sum(s.episodes for s in snapshots),
        steps_per_s=sum(s.steps_per_s * s.num_envs for s in snapshots),
        max_policy_lag=max((s.policy_lag for s in snapshots), default=0),
        ring_fill=sum(s.ring_fill for s in snapshots),
        weight_version=max((s.weight_version for s in snapshots), default=0),
        per_collector=per,
        timing_ms={k: sum(v) / len(v) for k, v in stages.items()},
        time_pct={k: sum(v) / len(v) for k, v in shares.items()},
    )


def offer(q: Any, item: object) -> bool:
    """Put ``item`` on a bounded multiprocessing queue without blocking; False if it was dropped."""
    try:
        q.put_nowait(item)
    except queue.Full:
        return False
    return True
