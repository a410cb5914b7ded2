"""Shared counters of a run: one int64 block in shared memory, every field with a single writer.

# Note [control layout]
The parent allocates one int64 tensor (``share_memory_()``, no named /dev/shm entry survives) and
hands it to every worker at spawn. Fields and their only writer:

    stop                 parent         set once; every worker stops when it reads 1
    release_learners     parent         learners may exit (their collectors have exited; a CUDA-IPC
                                        allocation must outlive its consumers)
    global_step          learner 0      full batches seen (collector_steps // num_collectors)
    updates              learner 0      gradient updates run
    final_checkpoint     learner 0      global step of its final checkpoint + 1 (0: none), written
                                        before its done flag: the parent names the file from it, so
                                        no stats snapshot (bounded queue, flushed by a thread) has
                                        to arrive for the run's result to know its last checkpoint
    collector i: steps, weight_version, policy_lag, ring_fill      collector i
    learner r: done      learner r
    failed w             worker w       CLOCK_MONOTONIC ns + 1 when it raised (0: has not), written
                                        the moment the exception leaves its body, before it closes
                                        anything: the parent learns of a failure at once, however
                                        long the worker then takes to unwind (a CUDA-IPC consumer
                                        waits for its producers). Worker slots: collectors 0..C-1,
                                        then learners C..C+L-1. CLOCK_MONOTONIC is one clock for
                                        every process of the host, so the earliest flag is the
                                        first failure (Note [naming the failed worker] in engine).
    stop hold r          learner r      CLOCK_MONOTONIC ns until which its final saves (checkpoint,
                                        replay) hold a stop (0: none): the parent's abort waits for
                                        them until then or until r is done (Note [a stop waits for
                                        the replay write] in ``fastsac_core._replay_file``).

Aligned 8-byte stores and loads are single-copy atomic on x86-64 and a single writer needs no
read-modify-write, so no lock is taken anywhere (a dead lock holder cannot block the run).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

__all__ = ["Control"]

_STOP, _RELEASE, _GLOBAL_STEP, _UPDATES, _FINAL_CHECKPOINT = 0, 1, 2, 3, 4
_HEADER = 8
_PER_COLLECTOR = 4
_STEPS, _VERSION, _LAG, _FILL = 0, 1, 2, 3


class Control:
    """Stop flag, step counters and per-collector gauges shared by the parent and its workers.

    Args:
        num_collectors: Collector processes.
        num_learners: Learner processes.
    """

    def __init__(self, num_collectors: int, num_learners: int) -> None:
        self.num_collectors = num_collectors
        self.num_learners = num_learners
        size = self._held_at + num_learners
        self._tensor = torch.zeros(size, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]
        self._view: npt.NDArray[np.int64] = self._tensor.numpy()

    def __getstate__(self) -> dict[str, Any]:
        return {"n": self.num_collectors, "l": self.num_learners, "t": self._tensor}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.num_collectors = state["n"]
        self.num_learners = state["l"]
        self._tensor = state["t"]
        self._view = self._tensor.numpy()

    @property
    def _failed_at(self) -> int:
        """Index of worker slot 0's failure mark (after the learners' done flags)."""
        return _HEADER + _PER_COLLECTOR * self.num_collectors + self.num_learners

    @property
    def _held_at(self) -> int:
        """Index of learner 0's stop hold (after the failure marks)."""
        return self._failed_at + self.num_collectors + self.num_learners

    def _c(self, index: int, field: int) -> int:
        return _HEADER + _PER_COLLECTOR * index + field

    # Parent-written.
    def request_stop(self) -> None:
        """Ask every worker to stop (parent only)."""
        self._view[_STOP] = 1

    @property
    def stop_requested(self) -> bool:
        """True once the parent asked every worker to stop."""
        return bool(self._view[_STOP])

    def release_learners(self) -> None:
        """Let the learners exit (parent only, after the collectors have exited)."""
        self._view[_RELEASE] = 1

    @property
    def learners_released(self) -> bool:
        """True once learners may exit."""
        return bool(self._view[_RELEASE])

    def resume_collector_steps(self, steps: list[int]) -> None:
        """Start the collector counters at ``steps`` (parent only, before spawning)."""
        for i, value in enumerate(steps):
            self._view[self._c(i, _STEPS)] = value

    # Collector-written.
    def set_collector_steps(self, index: int, steps: int) -> None:
        """Collector ``index`` publishes its step count (collector ``index`` only)."""
        self._view[self._c(index, _STEPS)] = steps

    def set_collector_gauges(self, index: int, *, version: int, lag: int, ring_fill: int) -> None:
        """Collector ``index`` publishes its weight version, policy lag and ring fill."""
        self._view[self._c(index, _VERSION)] = version
        self._view[self._c(index, _LAG)] = lag
        self._view[self._c(index, _FILL)] = ring_fill

    def collector_steps(self, index: int) -> int:
        """Steps of collector ``index``."""
        return int(self._view[self._c(index, _STEPS)])

    def all_collector_steps(self) -> list[int]:
        """Steps of every collector."""
        return [self.collector_steps(i) for i in range(self.num_collectors)]

    def total_collector_steps(self, indices: range | list[int] | None = None) -> int:
        """Sum of the collectors' steps (all, or ``indices``)."""
        chosen = range(self.num_collectors) if indices is None else indices
        return sum(self.collector_steps(i) for i in chosen)

    def gauges(self, index: int) -> tuple[int, int, int]:
        """Collector ``index``'s (weight version, policy lag, ring fill)."""
        return (
            int(self._view[self._c(index, _VERSION)]),
            int(self._view[self._c(index, _LAG)]),
            int(self._view[self._c(index, _FILL)]),
        )

    # Learner-written.
    def set_progress(self, *, global_step: int, updates: int) -> None:
        """Learner 0 publishes the global step and its update count."""
        self._view[_GLOBAL_STEP] = global_step
        self._view[_UPDATES] = updates

    @property
    def global_step(self) -> int:
        """Full batches seen by learner 0."""
        return int(self._view[_GLOBAL_STEP])

    @property
    def updates(self) -> int:
        """Updates run by learner 0."""
        return int(self._view[_UPDATES])

    def set_final_checkpoint(self, global_step: int) -> None:
        """Learner 0 wrote its final checkpoint at ``global_step`` (before it marks itself done)."""
        self._view[_FINAL_CHECKPOINT] = global_step + 1

    @property
    def final_checkpoint_step(self) -> int | None:
        """Global step of learner 0's final checkpoint, or None while it has written none."""
        value = int(self._view[_FINAL_CHECKPOINT])
        return value - 1 if value else None

    def mark_learner_done(self, rank: int) -> None:
        """Learner ``rank`` finished its loop."""
        self._view[_HEADER + _PER_COLLECTOR * self.num_collectors + rank] = 1

    def learner_done(self, rank: int) -> bool:
        """True once learner ``rank`` finished its loop."""
        return bool(self._view[_HEADER + _PER_COLLECTOR * self.num_collectors + rank])

    def hold_stop(self, rank: int, until: float) -> None:
        """Learner ``rank``'s final saves hold a stop until ``until`` (monotonic s) or its done flag."""
        self._view[self._held_at + rank] = int(until * 1e9)

    def stop_held(self) -> bool:
        """True while a learner that is not done holds a stop (parent: wait before stopping at once)."""
        now = time.monotonic_ns()
        return any(
            self._view[self._held_at + r] > now and not self.learner_done(r) for r in range(self.num_learners)
        )

    def abort_due(self, *, aborted: bool, forced: bool) -> bool:
        """Whether the parent stops at once now, given an abort asked for and whether it was forced.

        Note [a stop waits for the replay write] (``fastsac_core._replay_file``): a forced abort (a
        second signal) stops at once; any other (the grace period ran out, a lost host) waits while a
        learner's final saves hold the stop (:meth:`stop_held`).
        """
        return forced or (aborted and not self.stop_held())

    # Worker-written: failures.
    def collector_slot(self, index: int) -> int:
        """Worker slot of collector ``index`` (for :meth:`reporting_failure`)."""
        return index

    def learner_slot(self, rank: int) -> int:
        """Worker slot of learner ``rank`` (for :meth:`reporting_failure`)."""
        return self.num_collectors + rank

    def mark_failed(self, slot: int) -> None:
        """Worker ``slot`` failed now (that worker only; the first mark stays)."""
        if not self._view[self._failed_at + slot]:
            self._view[self._failed_at + slot] = time.monotonic_ns() + 1

    def failures(self) -> dict[int, int]:
        """Worker slot -> CLOCK_MONOTONIC ns of its failure, for every worker that marked one."""
        count = self.num_collectors + self.num_learners
        marks = self._view[self._failed_at : self._failed_at + count]
        return {slot: int(mark) - 1 for slot, mark in enumerate(marks) if mark}

    @contextmanager
    def reporting_failure(
        self,
        slot: int,
        *,
        record: Callable[[BaseException], None] = lambda exc: None,
        ignore: tuple[type[BaseException], ...] = (),
    ) -> Iterator[None]:
        """Mark and record worker ``slot``'s failure the moment an exception leaves the block, then re-raise.

        Enter it innermost, inside whatever the worker closes on its way out, so the mark and the
        traceback (``record``, whose own errors are ignored) come before any of that unwinding. A
        clean ``SystemExit`` and the ``ignore`` types are not failures.
        """
        try:
            yield
        except BaseException as exc:
            clean_exit = isinstance(exc, SystemExit) and exc.code in (0, None)
            if not clean_exit and not isinstance(exc, ignore):
                self.mark_failed(slot)  # first: a record that fails must not hide the failure
                with contextlib.suppress(Exception):
                    record(exc)
            raise
