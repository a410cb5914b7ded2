"""The placement printed before anything spawns: topology's plan for the async trainer.

:func:`resolve_placement` is the one way the app resolves it: ``fastsac_topology.resolve_trainer_topology``
with the host layout from ``numa_bind.discover_host()``, for a resolved run (the CLI, before the
run folder exists) or a :class:`~fastsac_trainer.plan.RunPlan` built without one. Invalid layouts come back
as one :class:`~fastsac_trainer.config.exceptions.TrainerAppError` line.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol

from fastsac_async import AsyncOptions
from fastsac_core import EnvDims, FastSACConfig, build_actor
from fastsac_topology import TopologyError, TrainerTopology, resolve_trainer_topology
from fastsac_trainer.config.host import host_layout
from fastsac_trainer.config.memory import check_memory
from fastsac_trainer.config.validate import _OPTS, topology_config_error

__all__ = ["PlacedRun", "actor_param_bytes", "describe_placement", "resolve_placement"]


class PlacedRun(Protocol):
    """What placement reads of a run (``ResolvedRun`` and ``RunPlan`` both have it)."""

    @property
    def num_envs(self) -> int:
        """Envs per iteration."""
        ...

    @property
    def agent(self) -> FastSACConfig:
        """FastSAC hyper-parameters (batch size, actor width)."""
        ...

    @property
    def async_options(self) -> AsyncOptions:
        """Counts, devices and transport switches."""
        ...

    @property
    def device(self) -> str:
        """Resolved trainer device."""
        ...


def actor_param_bytes(dims: EnvDims, agent: FastSACConfig) -> int:
    """Bytes of the actor's float32 parameters (the weight-IPC size gate compares against it)."""
    actor = build_actor(dims, agent)
    return 4 * sum(p.numel() for p in actor.parameters())


def checked_placement(run: Any, cuda_count: int, explicit: Collection[str]) -> TrainerTopology | None:
    """An asynchronous run's placement on this host (None for a synchronous one), once its memory fits.

    What a launch checks before it writes anything, and ``trainer --cfg job`` too.

    Raises:
        TrainerAppError: The layout is impossible here, or it would not fit the host's or GPU's memory.
    """
    topology = resolve_placement(run, run.dims, cuda_count) if run.asynchronous else None
    check_memory(run, topology, explicit)  # Note [memory check]
    return topology


def resolve_placement(run: PlacedRun, dims: EnvDims, cuda_count: int) -> TrainerTopology:
    """Topology's plan for ``run`` on this host (the one place the app resolves it).

    ``dims`` are the task's (``ResolvedRun.dims``, ``RunPlan.run.dims``): they size the actor for the
    weight-IPC gate.

    Raises:
        TrainerAppError: The layout is impossible on this host (topology's message, with the key path
            of the setting it names).
    """
    options = run.async_options
    try:
        return resolve_trainer_topology(
            num_envs=run.num_envs,
            num_collectors=options.num_collectors,
            num_learners=options.num_learners,
            batch_size=run.agent.batch_size,
            trainer_device=run.device,
            learner_devices=options.learner_devices,
            num_cuda_devices=cuda_count,
            collector_inference_device=options.collector_inference_device,
            cpus_per_collector=options.cpus_per_collector,
            transition_ipc=options.transition_ipc,
            weight_ipc=options.weight_ipc,
            weight_ipc_min_bytes=options.weight_ipc_min_bytes,
            actor_param_bytes=actor_param_bytes(dims, run.agent),
            host=host_layout(with_gpus=cuda_count > 0),
        )
    except TopologyError as error:
        raise topology_config_error(error) from None


def describe_placement(run: PlacedRun, topology: TrainerTopology | None) -> str:
    """The resolved topology as a table (async), or the one-process summary (sync).

    A collector policy compile asked for where a GPU learner's collectors infer on their CPUs (``auto``
    puts a small policy call there) compiles nothing: one more note says so.
    """
    if topology is None:
        return f"synchronous trainer: one process, {run.num_envs} envs, device {run.device}"
    rendered: str = topology.render()
    gpu_learners = any(learner.device != "cpu" for learner in topology.learners)
    on_cpus = any(collector.inference_device == "cpu" for collector in topology.collectors)
    if run.async_options.collector_compile and gpu_learners and on_cpus:
        rendered += (
            f"\nnote: {_OPTS}.collector_compile=true compiles only a policy on CUDA, and these collectors "
            f"infer on their CPUs; set {_OPTS}.collector_inference_device=cuda to compile it"
        )
    return rendered
