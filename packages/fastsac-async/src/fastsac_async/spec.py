"""What the parent hands every worker: the resolved run, picklable."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from fastsac_async.config import AsyncOptions
from fastsac_async.evaluator.settings import EvalSettings
from fastsac_async.exceptions import AsyncConfigError
from fastsac_async.hosts import HostGroup
from fastsac_core import EnvDims, EnvFactory, FastSACConfig, policy_extra_fields, transition_fields
from fastsac_topology import LearnerPlacement, TrainerTopology
from shm_transport import FieldSpec, RingLayout

__all__ = [
    "PUBLISHED_GSTEP",
    "EngineSpec",
    "TrainingRun",
    "best_checkpoint_file",
    "checkpoint_dir",
    "checkpoint_file",
    "checkpoint_step",
    "collector_name",
    "eval_clip_file",
    "evaluator_name",
    "learner_name",
    "learner_threads",
    "published_stamp",
    "ring_layout",
    "weight_extras",
]

PUBLISHED_GSTEP = "published_gstep"
"""The weight extra that stamps a snapshot with the global step it was published at (int64, ``(1,)``):
an evaluation is logged at the env steps of the weights it ran (Note [evaluation during training])."""


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


def learner_threads(spec: EngineSpec, placement: LearnerPlacement) -> int:
    """Intra-op torch threads of a learner (``spec.learner_threads``, or the default it documents)."""
    if spec.learner_threads is not None:
        return max(1, spec.learner_threads)
    if placement.device.startswith("cuda"):
        return 1
    return len(placement.cpus) if placement.cpus else 2


def collector_name(index: int) -> str:
    """Worker name of collector ``index``."""
    return f"collector{index}"


def learner_name(rank: int) -> str:
    """Worker name of learner ``rank``."""
    return f"learner{rank}"


def evaluator_name() -> str:
    """Worker name of the evaluator."""
    return "evaluator"


def rendezvous_file(run_dir: Path) -> Path:
    """The learners' torch.distributed file rendezvous (the parent removes a stale one before a run)."""
    return run_dir / "ddp_rendezvous"


def checkpoint_dir(run_dir: Path) -> Path:
    """Folder of a run's checkpoints (``checkpoints/``)."""
    return run_dir / "checkpoints"


_CHECKPOINT_NAME = re.compile(r"model_(\d+)\.pt")
"""The names :func:`checkpoint_file` gives, read back by :func:`checkpoint_step`."""


def checkpoint_file(run_dir: Path, gstep: int) -> Path:
    """``checkpoints/model_{gstep:07d}.pt`` under the run folder.

    The one naming of checkpoints: the engine's learner and the app's synchronous trainer write it,
    :func:`checkpoint_step` reads it back (the app's ``run_dir.latest_checkpoint`` asks it).
    """
    return checkpoint_dir(run_dir) / f"model_{gstep:07d}.pt"


def checkpoint_step(path: Path) -> int | None:
    """The global step of a checkpoint named by :func:`checkpoint_file`, or None for any other file.

    ``best.pt`` (a policy checkpoint), a killed write's ``.model_0000100.pt.<random>.tmp`` and other
    files in ``checkpoints/`` are not checkpoints of a step.
    """
    match = _CHECKPOINT_NAME.fullmatch(path.name)
    return int(match.group(1)) if match else None


def best_checkpoint_file(run_dir: Path) -> Path:
    """``checkpoints/best.pt``: the policy of the best evaluation so far (a policy checkpoint)."""
    return checkpoint_dir(run_dir) / "best.pt"


def eval_clip_file(run_dir: Path, gstep: int) -> Path:
    """``videos/eval_{gstep:07d}.mp4``: the clip of the evaluation of the weights published at ``gstep``.

    The recorder writes a GIF of the same clip beside it (``.gif``, what TensorBoard shows).
    """
    return run_dir / "videos" / f"eval_{gstep:07d}.mp4"


def ring_layout(dims: EnvDims, num_envs: int) -> RingLayout:
    """The transition slot of a collector stepping ``num_envs`` envs (fastsac_core's transition fields)."""
    return RingLayout.of(num_envs, transition_fields(dims.obs_dim, dims.stored_critic_obs_dim, dims.act_dim))


def weight_extras(dims: EnvDims) -> dict[str, FieldSpec]:
    """Extras published with the actor weights: ``FastSACAgent.policy_extras`` and ``PUBLISHED_GSTEP``."""
    extras = {
        name: FieldSpec(shape, dtype) for name, (shape, dtype) in policy_extra_fields(dims.obs_dim).items()
    }
    extras[PUBLISHED_GSTEP] = FieldSpec((1,), torch.int64)
    return extras


def published_stamp(gstep: int) -> Tensor:
    """The ``PUBLISHED_GSTEP`` extra of a snapshot published at ``gstep`` (a fresh host tensor)."""
    return torch.tensor([gstep], dtype=torch.int64)
