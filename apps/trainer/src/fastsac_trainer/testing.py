"""Helpers for tests (this app's and the repository's): a recording reporter, a CPU-sized run.

Kept in the package (not in a test folder) so that tests in any folder import them by name, as
``fastsac_core.testing`` and ``fastsac_async.testing`` are.
"""

from __future__ import annotations

from pathlib import Path

from fastsac_trainer.reporting import EvalPoint, Snapshot

__all__ = ["CPU_SIZED", "RecordingReporter"]


class RecordingReporter:
    """A :class:`~fastsac_trainer.reporting.Reporter` that keeps everything it is given, in order."""

    def __init__(self) -> None:
        self.snapshots: list[Snapshot] = []
        """Every snapshot reported."""
        self.evaluations: list[EvalPoint] = []
        """Every evaluation handed over."""
        self.checkpoints: list[Path] = []
        """The path of every checkpoint saved."""
        self.closed = False
        """Whether :meth:`close` was called."""

    def report(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot``."""
        self.snapshots.append(snapshot)

    def evaluated(self, point: EvalPoint) -> None:
        """Keep ``point``."""
        self.evaluations.append(point)

    def checkpoint_saved(self, path: Path) -> None:
        """Keep ``path``."""
        self.checkpoints.append(path)

    def close(self) -> None:
        """Note that the trainer closed it."""
        self.closed = True


CPU_SIZED = (
    "algo.agent.actor_hidden_dim=64",
    "algo.agent.critic_hidden_dim=128",
    "algo.agent.batch_size=256",
    "algo.agent.num_updates=4",
    "task.num_envs=8",
)
"""A learning test's compute scaled to a 2-core CPU, as the ``pendulum`` task's is: networks 64/128,
batch 256, 8 envs x 4 updates. The learning settings (gamma, rates, support...) stay the task's."""
