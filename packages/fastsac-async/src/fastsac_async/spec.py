"""What the parent hands every worker: the resolved run, picklable."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fastsac_async.config import AsyncOptions
from fastsac_async.eval_settings import EvalSettings
from fastsac_async.exceptions import AsyncConfigError
from fastsac_async.hosts import HostGroup
from fastsac_async.run_layout import RunLayout
from fastsac_core import EnvDims, EnvFactory, FastSACConfig, ReplayLayout
from fastsac_topology import LearnerPlacement, TrainerTopology

__all__ = ["EngineSpec", "TrainingRun", "learner_threads"]


@dataclass(frozen=True, kw_only=True)
class TrainingRun:
    """What both trainers read of a run besides the agent and the placement.

    The task, the seed, the budget, the cadence and the folder: the app builds it once from its
    config, and its plan and the engine's spec hold it as it is.
    """

    env_factory: EnvFactory
    """Picklable ``(num_envs, seed) -> BatchedEnv``."""
    dims: EnvDims
    """Task dimensions and action bounds, probed from one env."""
    seed: int
    """Base seed (collector i uses seed + i, learner r seed + 1000 + r)."""
    num_iterations: int
    """Iterations (full env batches) of the run, counted from zero (a resumed run continues)."""
    time_limit_s: float | None = None
    """Wall-clock budget of training in seconds (None: none)."""
    logging_interval: int
    """Iterations between reports (stats snapshots)."""
    save_interval: int
    """Iterations between checkpoints (0: only the final one)."""
    run_dir: Path
    """The run folder (``runs/<run>``), already created."""
    resume_from: Path | None = None
    """Checkpoint to continue from."""
    evaluation: EvalSettings | None = None
    """Periodic deterministic evaluation (None: none; Note [evaluation during training] in
    ``fastsac_async.evaluator.loop``): the engine's evaluator worker, or the synchronous trainer inline."""
    save_replay: bool = True
    """Save each learner rank's replay buffer (``RunLayout.replay``) and restore it on a resume; off: a
    resume restarts learning from an empty buffer."""
    replay_save_interval_s: float | None = 600.0
    """Seconds between two periodic replay writes (also written at the end of every launch); None:
    only at the end (Note [replay file] in ``fastsac_core._replay_file``)."""

    @property
    def layout(self) -> RunLayout:
        """Every path in the run folder (``fastsac_async.run_layout``)."""
        return RunLayout(self.run_dir)

    def replay_path(self, rank: int) -> Path | None:
        """Where learner rank ``rank`` (run-wide) writes its replay buffer; None with ``save_replay`` off."""
        return self.layout.replay(rank) if self.save_replay else None

    def replay_to_resume(self, rank: int, host: int = 0) -> Path | None:
        """The replay file learner rank ``rank`` (run-wide) of host ``host`` restores, or None.

        It lies beside the checkpoint resumed from (host R > 0: in that run's ``host<R>/``), also when
        the resumed run writes into a new folder. None when not resuming or with ``save_replay`` off.
        """
        if self.resume_from is None or not self.save_replay:
            return None
        layout = RunLayout.of_folder(self.resume_from.parent)
        return (layout.host(host) if host else layout).replay(rank)


@dataclass(frozen=True, kw_only=True)
class EngineSpec:
    """A resolved asynchronous run (the app builds it from its RunPlan).

    It holds the resolved records as they are (run, agent, options, topology, hosts), never copies of
    their fields, and adds only the engine's own settings (timeouts, learner threads).
    """

    run: TrainingRun
    """Task, seed, budget, cadence and folder."""
    agent: FastSACConfig
    """FastSAC hyper-parameters."""
    options: AsyncOptions
    """Asynchronous options."""
    topology: TrainerTopology
    """Placement of every learner and collector, and their transports."""
    hosts: HostGroup | None = None
    """This host's place in a run across hosts (None: the run is this host; Note [learners across
    hosts] in ``fastsac_async.hosts``)."""
    rendezvous_timeout_s: float = 120.0
    """Longest wait for the learners' process group to form, and for any one collective among them
    (torch.distributed's timeout: a rank left waiting longer fails the run)."""
    shutdown_timeout_s: float = 30.0
    """Budget of the graceful part of the shutdown (then stack dumps and SIGKILL for what is left)."""
    learner_threads: int | None = None
    """torch intra-op threads of a learner process; None: 1 for a CUDA learner (more only add host
    overhead to a launch-bound update: wiki/benchmarks.md, Learner), else its pinned CPUs (2 unpinned)."""

    def __post_init__(self) -> None:
        """Check that the options and the topology count the same workers (the topology is read).

        Raises:
            AsyncConfigError: ``options.num_collectors`` or ``options.num_learners`` differs from the
                topology's count.
        """
        for setting, planned in (
            ("num_collectors", len(self.topology.collectors)),
            ("num_learners", len(self.topology.learners)),
        ):
            if getattr(self.options, setting) != planned:
                raise AsyncConfigError.of_option(
                    setting,
                    getattr(self.options, setting),
                    f"the topology places {planned}; resolve the topology from these options",
                )

    @property
    def num_collectors(self) -> int:
        """Collector processes (the topology's, equal to ``options.num_collectors``)."""
        return len(self.topology.collectors)

    @property
    def num_learners(self) -> int:
        """Learner processes (the topology's, equal to ``options.num_learners``)."""
        return len(self.topology.learners)

    def replay_layout(self, rank: int) -> ReplayLayout:
        """The replay buffer of local learner ``rank``: its collectors' envs, one block each (ragged ingest).

        With ``generations`` ingest the envs form one block.
        """
        widths = [c.env_stop - c.env_start for c in self.topology.collectors_of(rank)]
        blocks = widths if self.options.ingest == "ragged" else None
        return ReplayLayout.of(self.run.dims, self.agent, sum(widths), blocks)


def learner_threads(spec: EngineSpec, placement: LearnerPlacement) -> int:
    """Intra-op torch threads of a learner (``spec.learner_threads``, or the default it documents)."""
    if spec.learner_threads is not None:
        return max(1, spec.learner_threads)
    if placement.device.startswith("cuda"):
        return 1
    return len(placement.cpus) if placement.cpus else 2
