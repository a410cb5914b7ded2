"""The placement printed before anything spawns: topology's plan for the async trainer.

Calls ``topology.resolve_trainer_topology`` with the host layout from
``numa_bind.discover_host()`` and returns its ``render()``. Invalid layouts come back as one
:class:`~trainer.config.exceptions.TrainerAppError` line.
"""

from __future__ import annotations

from fastsac_async.config import AsyncOptions
from fastsac_core import FastSACConfig, build_actor
from fastsac_core.env import EnvDims
from topology import TopologyError, TrainerTopology, resolve_trainer_topology
from trainer.config.exceptions import TrainerAppError
from trainer.config.host import host_layout
from trainer.config.resolve import ResolvedRun

__all__ = ["actor_param_bytes", "describe_placement", "placement_of", "resolve_placement"]


def actor_param_bytes(dims: EnvDims, agent: FastSACConfig) -> int:
    """Bytes of the actor's float32 parameters (the weight-IPC size gate compares against it)."""
    actor = build_actor(dims, agent)
    return 4 * sum(p.numel() for p in actor.parameters())


def resolve_placement(
    *,
    num_envs: int,
    dims: EnvDims,
    agent: FastSACConfig,
    options: AsyncOptions,
    device: str,
    cuda_count: int,
) -> TrainerTopology:
    """Topology's plan for these settings on this host (the one place the app resolves it).

    Raises:
        topology.TopologyError: The layout is impossible on this host.
    """
    return resolve_trainer_topology(
        num_envs=num_envs,
        num_collectors=options.num_collectors,
        num_learners=options.num_learners,
        batch_size=agent.batch_size,
        trainer_device=device,
        learner_devices=options.learner_devices,
        num_cuda_devices=cuda_count,
        collector_inference_device=options.collector_inference_device,
        cpus_per_collector=options.cpus_per_collector,
        transition_ipc=options.transition_ipc,
        weight_ipc=options.weight_ipc,
        weight_ipc_min_bytes=options.weight_ipc_min_bytes,
        actor_param_bytes=actor_param_bytes(dims, agent),
        host=host_layout(with_gpus=cuda_count > 0),
    )


def placement_of(run: ResolvedRun, cuda_count: int) -> TrainerTopology | None:
    """The async trainer's topology for ``run`` (None for the synchronous trainer).

    Raises:
        TrainerAppError: The layout is impossible on this host (topology's own message).
    """
    if not run.config["algo"]["trainer"]["asynchronous"]:
        return None
    try:
        return resolve_placement(
            num_envs=run.config["task"]["num_envs"],
            dims=run.dims,
            agent=run.agent,
            options=run.async_options,
            device=run.device,
            cuda_count=cuda_count,
        )
    except TopologyError as error:
        raise TrainerAppError(str(error).splitlines()[0]) from None


def describe_placement(run: ResolvedRun, topology: TrainerTopology | None) -> str:
    """The resolved topology as a table (async), or the one-process summary (sync)."""
    if topology is None:
        return f"synchronous trainer: one process, {run.config['task']['num_envs']} envs, device {run.device}"
    rendered: str = topology.render()
    return rendered
