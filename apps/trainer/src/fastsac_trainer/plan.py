"""A resolved, validated run: what the app hands to the synchronous or asynchronous trainer.

The CLI turns the hydra config into a :class:`RunPlan` (devices resolved, task probed, library
configs built); both trainers take only this, never the raw config.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastsac_async import AsyncOptions, HostGroup, TrainingRun, iteration_env_steps
from fastsac_core import FastSACConfig
from fastsac_topology import TrainerTopology

__all__ = ["RunPlan"]


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """Everything a trainer needs to run, already validated.

    The library records are held as resolved, never copied field by field: what both trainers read
    of the run (task, seed, budget, cadence, folder) is ``run``, which the async trainer hands to
    the engine as it is; the agent, the async options, the topology and the hosts are their own
    records. The fields left are the app's own settings.
    """

    task_name: str
    """Task name (``humanoid``)."""
    run: TrainingRun
    """The env factory and dims, seed, iterations, time limit, logging and save intervals, run folder
    and checkpoint to resume (``fastsac_async.TrainingRun``)."""
    num_envs: int
    """Envs per iteration of this host (all its collectors together)."""
    agent: FastSACConfig
    """FastSAC hyper-parameters."""
    async_options: AsyncOptions
    """Asynchronous layout and transport options (ignored by the synchronous trainer)."""
    asynchronous: bool
    """Which trainer runs."""
    device: str
    """Resolved trainer device: ``cpu`` or ``cuda:N``."""
    stop_grace_s: float = 5.0
    """After a stop signal, the longest wait for a clean stop; then the run stops at once."""
    checkpoint_signal: str | None = None
    """Name of a signal that stops the run with a final checkpoint, like SIGTERM (``SIGUSR1``)."""
    topology: TrainerTopology | None = None
    """Placement of the asynchronous trainer, resolved once before anything spawns (None: resolve
    on demand; the synchronous trainer ignores it)."""
    hosts: HostGroup | None = None
    """This host's place in a run across hosts launched by torchrun (None: the run is this host)."""

    @property
    def env_steps_per_iteration(self) -> int:
        """Env steps of one iteration of the whole run (``num_envs`` times the hosts): its metrics' x axis."""
        return iteration_env_steps(self.num_envs, self.hosts)
