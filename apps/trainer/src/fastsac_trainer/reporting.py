"""What a trainer (sync or async) hands to the app's sinks: console, TensorBoard, logs.

Trainers never render; they build :class:`Snapshot` objects and pass them to a
:class:`Reporter`, and hand it each evaluation once, as it finishes (:class:`EvalLog`: the same
for both trainers, so an evaluation that finishes after the last snapshot is logged too). The
console and the TensorBoard writer are reporters.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

__all__ = ["EvalLog", "EvalPoint", "Reporter", "Snapshot", "replay_reuse", "time_left"]

_log = logging.getLogger(__name__)


def replay_reuse(updates_per_s: float, batch_size: int, env_steps_per_s: float) -> float:
    """``async/reuse``: transitions sampled for gradient updates per transition collected, over one interval.

    The replay ratio of the published parallel-SAC recipes (updates × batch ÷ new transitions); 0 while
    nothing is collected.
    """
    return updates_per_s * batch_size / env_steps_per_s if env_steps_per_s > 0 else 0.0


def time_left(limit_s: float | None, launch_elapsed_s: float) -> float | None:
    """Seconds left of the launch's ``algo.trainer.time_limit_s`` after ``launch_elapsed_s`` (None: none)."""
    return None if limit_s is None else max(0.0, limit_s - launch_elapsed_s)


@dataclass(frozen=True, kw_only=True)
class EvalPoint:
    """One deterministic evaluation during training (logged as ``eval/return``, ``eval/episode_length``)."""

    iteration: int
    """Global step at which the evaluated weights were published."""
    env_steps: int
    """Env steps at which they were published (the x of its points)."""
    mean_return: float
    """Mean return of the evaluation's episodes."""
    mean_length: float
    """Mean episode length."""
    best_return: float
    """Best mean return of the run so far (this one's included; ``checkpoints/best.pt`` holds it)."""
    seconds: float
    """Wall time the evaluation took."""
    video: Path | None = None
    """The clip recorded of the evaluated weights (``algo.trainer.eval_video_every``), its GIF beside it."""
    video_error: str | None = None
    """Why the clip due with this evaluation failed (one line), if it did."""


@dataclass(kw_only=True)
class Snapshot:
    """One reporting tick of a running trainer."""

    iteration: int
    """Global step: collector iterations of the full env batch so far."""
    env_steps: int
    """Transitions collected so far (iteration * env steps per iteration: every host's envs)."""
    total_env_steps: int
    """Transitions the run is budgeted for (for progress and ETA)."""
    elapsed_s: float
    """Wall-clock seconds since training started (boot excluded)."""
    scalars: dict[str, float] = field(default_factory=dict)
    """Metrics by their TensorBoard names (``perf/env_steps_per_s``, ``train/qf_loss``, ...)."""
    timing: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per worker group (``collector0``, ``learner0``, ``sync``): stage path -> mean ms."""
    warming_up: bool = False
    """True until learning starts."""
    last_eval: EvalPoint | None = None
    """The latest evaluation of the run so far (what the console shows)."""
    time_left_s: float | None = None
    """Seconds left of this launch's time limit (:func:`time_left`; None: no limit): the console's
    estimate of the time left never exceeds it."""
    stale: frozenset[str] = frozenset()
    """Scalars whose source did not report in this snapshot's interval: their values are carried from
    an earlier one (the asynchronous trainer's collectors or learner; empty: all were measured). The
    plain console leaves them out (Note [fresh fields] in ``fastsac_trainer.console.plain``)."""


class Reporter(Protocol):
    """A sink of training progress."""

    def report(self, snapshot: Snapshot) -> None:
        """Take one snapshot (called every logging interval)."""
        ...

    def evaluated(self, point: EvalPoint) -> None:
        """An evaluation finished (called once for each, before the next snapshot)."""
        ...

    def checkpoint_saved(self, path: Path) -> None:
        """A checkpoint was written to ``path``."""
        ...

    def close(self) -> None:
        """Flush and release."""
        ...


class EvalLog:
    """A trainer's evaluations: each handed to the reporter once, the latest shown with every snapshot.

    The first clip that fails is said once (a warning of this module's logger, which the console
    shows): its reason and where the traceback is; later failures are only in that log.

    Args:
        reporter: Where each evaluation goes (:meth:`Reporter.evaluated`).
        clip_log: The log of the process that records the clips (it holds a failed clip's traceback).
    """

    def __init__(self, reporter: Reporter, clip_log: Path | None = None) -> None:
        self._reporter = reporter
        self._clip_log = clip_log
        self._clip_failure_said = False
        self.last: EvalPoint | None = None
        """The latest evaluation of the run so far."""

    def add(self, point: EvalPoint) -> None:
        """An evaluation finished: the reporter gets it now."""
        self.last = point
        if point.video_error is not None and not self._clip_failure_said:
            self._clip_failure_said = True
            where = "" if self._clip_log is None else f"; traceback in {self._clip_log}"
            _log.warning(
                "no clip of the evaluation at iteration %d: %s; training goes on, and later clips that "
                "fail are only logged%s", point.iteration, point.video_error, where,
            )  # fmt: skip
        self._reporter.evaluated(point)

    def report(self, snapshot: Snapshot) -> None:
        """Report ``snapshot`` with the latest evaluation."""
        snapshot.last_eval = self.last
        self._reporter.report(snapshot)
