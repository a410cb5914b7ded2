"""The placement printed before anything spawns: topology's plan for the async trainer.

Calls ``topology.resolve_trainer_topology`` with the host layout from
``numa_bind.discover_host()`` and returns its ``render()``. Invalid layouts come back as one
:class:`~trainer.config.exceptions.TrainerAppError` line.
"""

from __future__ import annotations

from typing import Any

from fastsac_core import build_actor
from trainer.config.exceptions import TrainerAppError
from trainer.config.resolve import ResolvedRun

__all__ = ["actor_param_bytes", "describe_placement"]


def actor_param_bytes(run: ResolvedRun) -> int:
    """Bytes of the actor's float32 parameters (the weight-IPC size gate compares against it)."""
    actor = build_actor(run.dims, run.agent)
    return 4 * sum(p.numel() for p in actor.parameters())


def describe_placement(run: ResolvedRun, cuda_count: int) -> str:
    """The resolved topology as a table (async), or the one-process summary (sync).

    Raises:
        TrainerAppError: The layout is impossible on this host (topology's own message).
    """
    if not run.config["algo"]["trainer"]["asynchronous"]:
        return f"synchronous trainer: one process, {run.config['task']['num_envs']} envs, device {run.device}"
    topology = _resolve_topology(run, cuda_count)
    rendered: str = topology.render()
    return rendered


def _resolve_topology(run: ResolvedRun, cuda_count: int) -> Any:
    from numa_bind import discover_host
    from topology import TopologyError, resolve_trainer_topology

    opts = run.async_options
    try:
        return resolve_trainer_topology(
            num_envs=run.config["task"]["num_envs"],
            num_collectors=opts.num_collectors,
            num_learners=opts.num_learners,
            batch_size=run.agent.batch_size,
            trainer_device=run.device,
            learner_devices=opts.learner_devices,
            num_cuda_devices=cuda_count,
            collector_inference_device=opts.collector_inference_device,
            cpus_per_collector=opts.cpus_per_collector,
            transition_ipc=opts.transition_ipc,
            weight_ipc=opts.weight_ipc,
            weight_ipc_min_bytes=opts.weight_ipc_min_bytes,
            actor_param_bytes=actor_param_bytes(run),
            host=discover_host(),
        )
    except TopologyError as error:
        raise TrainerAppError(str(error).splitlines()[0]) from None
