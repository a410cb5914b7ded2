"""A :class:`~trainer.reporting.Reporter` that writes TensorBoard event files into the run folder.

Scalars keep the names of ``Snapshot.scalars`` (the DESIGN names: ``perf/env_steps_per_s``,
``async/policy_lag``, ``rollout/mean_return``, ``train/qf_loss``, ...), with the global step
(collector iterations of the full env batch) as the x axis. Collector stage timings that the trainer
did not already put into ``scalars`` are added as ``perf/collector_<stage>_ms`` (mean over
collectors), the way the public reference names them.
"""

from __future__ import annotations

import math
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter

from trainer.reporting import Snapshot

__all__ = ["TensorBoardReporter", "collector_stage_means"]


def collector_stage_means(timing: dict[str, dict[str, float]]) -> dict[str, float]:
    """Mean ms of each stage over the ``collector*`` groups, keyed ``perf/collector_<stage>_ms``."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for group, stages in timing.items():
        if not group.startswith("collector"):
            continue
        for stage, ms in stages.items():
            sums[stage] = sums.get(stage, 0.0) + ms
            counts[stage] = counts.get(stage, 0) + 1
    return {f"perf/collector_{stage}_ms": sums[stage] / counts[stage] for stage in sums}


class TensorBoardReporter:
    """Writes every snapshot's scalars as TensorBoard events.

    Args:
        log_dir: Folder of the event files (the run folder).
        resumed_at: The iteration of the checkpoint this launch resumes, if any: TensorBoard hides
            the events an earlier launch of the run wrote after it (that launch went on past its
            last checkpoint), and keeps the ones up to it.
    """

    def __init__(self, log_dir: Path, resumed_at: int | None = None) -> None:
        purge_step = None if resumed_at is None else resumed_at + 1
        self._writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)

    def report(self, snapshot: Snapshot) -> None:
        """Write the snapshot's scalars at ``snapshot.iteration``; non-finite values are skipped."""
        scalars = dict(collector_stage_means(snapshot.timing))
        scalars.update(snapshot.scalars)
        for name, value in sorted(scalars.items()):
            if math.isfinite(value):
                self._writer.add_scalar(name, value, snapshot.iteration)
        self._writer.flush()

    def checkpoint_saved(self, path: Path) -> None:
        """Nothing to record for a checkpoint."""

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()
