"""Helpers for tests (this app's and the repository's): a recording reporter, tiny runs' overrides.

Kept in the package (not in a test folder) so that tests in any folder import them by name, as
``fastsac_core.testing`` and ``fastsac_async.testing`` are.
"""

from __future__ import annotations

from pathlib import Path

from fastsac_trainer.evaluate import evaluate, load_policy, one_torch_thread
from fastsac_trainer.reporting import EvalPoint, Snapshot
from fastsac_trainer.tasks import get_task

__all__ = [
    "ASYNC_BAND_RUN",
    "ASYNC_CPU_QUIET",
    "CPU_SIZED",
    "TINY_PENDULUM",
    "TINY_RUN",
    "RecordingReporter",
    "checkpoint_return",
]


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


TINY_PENDULUM = (
    "task=pendulum",
    "task.num_envs=2",
    "algo.trainer.logging_interval=2",
    "algo.agent.learning_starts=2",
    "algo.agent.batch_size=32",
    "algo.agent.num_updates=1",
    "console=plain",
)
"""A pendulum run that takes seconds on a CPU: 2 envs, 2 random iterations, then one update of 32 samples
per iteration; a snapshot every 2 iterations, the plain console. The caller adds the save interval and
whatever else it tests (trainer, device, budget, run folder)."""

TINY_RUN = (
    "task.num_envs=4",
    "algo.trainer.num_learning_iterations=6",
    "algo.trainer.logging_interval=2",
    "algo.trainer.save_interval=3",
    "algo.trainer.device=cpu",
    "algo.agent.learning_starts=2",
    "algo.agent.batch_size=32",
    "algo.agent.num_updates=1",
    "algo.agent.actor_hidden_dim=16",
    "algo.agent.critic_hidden_dim=16",
    "console=plain",
)
"""A CPU run of any task in seconds: 4 envs, 6 iterations (checkpoints at 3 and 6), networks 16 wide,
2 random iterations, then one update of 32 samples per iteration; the plain console. No ``task=``: the
caller names the task."""

CPU_SIZED = (
    "algo.agent.actor_hidden_dim=64",
    "algo.agent.critic_hidden_dim=128",
    "algo.agent.batch_size=256",
    "algo.agent.num_updates=4",
    "task.num_envs=8",
)
"""A learning test's compute scaled to a 2-core CPU, as the ``pendulum`` task's is: networks 64/128,
batch 256, 8 envs x 4 updates. The learning settings (gamma, rates, support...) stay the task's."""

ASYNC_CPU_QUIET = (
    "algo.trainer.asynchronous=true",
    "algo.trainer.device=cpu",
    "algo.trainer.eval_interval_s=null",
    "algo.trainer.save_interval=100000",
    "algo.trainer.logging_interval=100",
    "console=plain",
)
"""An asynchronous CPU run that only trains: no evaluator, a checkpoint only at its end, few console
lines. The caller names the task, the budget and the run folder."""

ASYNC_BAND_RUN = (*ASYNC_CPU_QUIET, "algo.trainer.async_options.max_lead=null")
"""The async resume band's runs (its test and ``benchmarks/resume_band.py``): ``ASYNC_CPU_QUIET`` with
the ring as the collectors' only bound, the setting the band was calibrated with. With a bounded
lead pendulum learns much faster, most seeds end at the task's cap, and a three-seed band of them
is too narrow to hold three resumes (wiki/benchmarks.md, "Asynchronous resume against uninterrupted
runs")."""


def checkpoint_return(checkpoint: Path, task: str, episodes: int) -> float:
    """The deterministic mean return of ``checkpoint``'s policy on ``episodes`` fresh episodes of ``task``.

    Seed 10,000: envs no training run of a test seeds. One torch thread, as ``trainer eval``.
    """
    policy, _ = load_policy(checkpoint)
    with one_torch_thread():
        return evaluate(policy, get_task(task).env_factory(), episodes, 10_000).mean_return
