"""``resolve_trainer_topology``: counts, devices and the host layout -> the placement plan."""

from __future__ import annotations

from collections.abc import Sequence

from fastsac_topology._counts import check_counts
from fastsac_topology._cpus import place_cpus
from fastsac_topology._devices import expand_learner_devices, inference_device
from fastsac_topology._plan import CollectorPlacement, LearnerPlacement, TrainerTopology
from fastsac_topology._transport import IpcMode, choose_transports
from fastsac_topology.exceptions import TopologyError
from numa_bind import HostLayout

__all__ = ["resolve_trainer_topology"]

_IPC_MODES = ("auto", "on", "off")


def _check_settings(
    *,
    cpus_per_collector: int | None,
    cpus_per_learner: int,
    num_cuda_devices: int,
    transition_ipc: str,
    weight_ipc: str,
    weight_ipc_min_bytes: int,
    actor_param_bytes: int,
) -> None:
    if cpus_per_collector is not None and cpus_per_collector < 1:
        raise TopologyError(
            f"cpus_per_collector={cpus_per_collector} must be at least 1; "
            "set a positive count, or null to leave collectors unpinned"
        )
    if cpus_per_learner < 1:
        raise TopologyError(f"cpus_per_learner={cpus_per_learner} must be at least 1; set a positive count")
    for name, value in (
        ("num_cuda_devices", num_cuda_devices),
        ("weight_ipc_min_bytes", weight_ipc_min_bytes),
        ("actor_param_bytes", actor_param_bytes),
    ):
        if value < 0:
            raise TopologyError(f"{name}={value} must not be negative")
    for name, mode in (("transition_ipc", transition_ipc), ("weight_ipc", weight_ipc)):
        if mode not in _IPC_MODES:
            raise TopologyError(f"{name}={mode!r} is not an IPC mode; use 'auto', 'on' or 'off'")


def resolve_trainer_topology(
    *,
    num_envs: int,
    num_collectors: int,
    num_learners: int,
    batch_size: int,
    trainer_device: str,
    learner_devices: Sequence[str] | None,
    num_cuda_devices: int,
    collector_inference_device: str,
    cpus_per_collector: int | None,
    cpus_per_learner: int = 2,
    transition_ipc: IpcMode,
    weight_ipc: IpcMode,
    weight_ipc_min_bytes: int,
    actor_param_bytes: int,
    host: HostLayout,
) -> TrainerTopology:
    """Resolve where every learner and collector runs and how they talk.

    Pure: no processes and no I/O; the host comes in as data (``numa_bind.discover_host``).
    Collectors are owned in contiguous blocks (collector i -> rank ``i // (num_collectors //
    num_learners)``) and sit on their owner's NUMA node; CPU placement follows Note [CPU
    placement] in ``fastsac_topology._cpus``; transports follow ``fastsac_topology._transport``.

    Args:
        num_envs: Envs in the global batch; split evenly over collectors.
        num_collectors: Collector processes; a multiple of ``num_learners``.
        num_learners: Learner ranks (one per GPU for CUDA learners).
        batch_size: The global update batch; split evenly over learners.
        trainer_device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (the caller resolves ``"auto"``).
        learner_devices: One device per rank, or None to expand from ``trainer_device``.
        num_cuda_devices: CUDA devices visible to the trainer.
        collector_inference_device: ``"auto"`` (the collector's CPU for a small policy call, else the
            owner's device: ``fastsac_topology._devices.inference_device``), ``"cuda"`` (owner's GPU),
            ``"cuda:N"`` or ``"cpu"``.
        cpus_per_collector: CPUs pinned per collector, or None (see Note [CPU placement]).
        cpus_per_learner: CPUs pinned per learner when learners are pinned.
        transition_ipc: ``"auto"``, ``"on"`` or ``"off"`` for the CUDA-IPC transition ring.
        weight_ipc: ``"auto"``, ``"on"`` or ``"off"`` for the CUDA-IPC weight channel.
        weight_ipc_min_bytes: Smallest actor for which ``"auto"`` picks weight IPC.
        actor_param_bytes: The actor's float32 parameter bytes (the weight-IPC gate; with the envs per
            collector, the size of a policy call for ``"auto"``).
        host: The host layout.

    Returns:
        The plan, with notes explaining fallbacks.

    Raises:
        TopologyError: Any invalid combination; the message names the values and a fix.
    """
    check_counts(
        num_envs=num_envs, num_collectors=num_collectors, num_learners=num_learners, batch_size=batch_size
    )
    _check_settings(
        cpus_per_collector=cpus_per_collector,
        cpus_per_learner=cpus_per_learner,
        num_cuda_devices=num_cuda_devices,
        transition_ipc=transition_ipc,
        weight_ipc=weight_ipc,
        weight_ipc_min_bytes=weight_ipc_min_bytes,
        actor_param_bytes=actor_param_bytes,
    )
    devices = expand_learner_devices(
        trainer_device=trainer_device,
        specs=learner_devices,
        num_learners=num_learners,
        num_cuda_devices=num_cuda_devices,
    )
    per_rank = num_collectors // num_learners
    owners = [index // per_rank for index in range(num_collectors)]
    width = num_envs // num_collectors
    inference = [
        inference_device(
            collector_inference_device,
            devices[owner],
            num_cuda_devices,
            envs_per_collector=width,
            actor_param_bytes=actor_param_bytes,
            ipc_requested="on" in (transition_ipc, weight_ipc),
        )
        for owner in owners
    ]
    cpus = place_cpus(
        host=host,
        devices=devices,
        owners=owners,
        cpus_per_collector=cpus_per_collector,
        cpus_per_learner=cpus_per_learner,
    )
    transports, transport_notes = choose_transports(
        devices=devices,
        collector_devices=inference,
        owners=owners,
        transition_ipc=transition_ipc,
        weight_ipc=weight_ipc,
        weight_ipc_min_bytes=weight_ipc_min_bytes,
        actor_param_bytes=actor_param_bytes,
    )
    return TrainerTopology(
        learners=tuple(
            LearnerPlacement(
                rank=rank, device=device, numa_node=cpus.learner_nodes[rank], cpus=cpus.learner_cpus[rank]
            )
            for rank, device in enumerate(devices)
        ),
        collectors=tuple(
            CollectorPlacement(
                index=index,
                env_start=index * width,
                env_stop=(index + 1) * width,
                owner_rank=owner,
                inference_device=inference[index],
                numa_node=cpus.collector_nodes[index],
                cpus=cpus.collector_cpus[index],
                transition_transport=transports[owner][0],
                weight_transport=transports[owner][1],
            )
            for index, owner in enumerate(owners)
        ),
        notes=(
            *_inference_notes(collector_inference_device, devices, inference, width),
            *cpus.notes,
            *transport_notes,
        ),
    )


def _inference_notes(spec: str, devices: Sequence[str], inference: Sequence[str], width: int) -> list[str]:
    """One note when ``auto`` put the collectors of GPU learners on their CPUs: a choice to show."""
    if spec.strip().lower() != "auto" or all(device == "cpu" for device in devices) or "cpu" not in inference:
        return []
    envs = f"{width} env{'s' * (width != 1)} each"
    return [
        f"collector_inference_device='auto': the collectors infer on their CPUs ({envs}: one core's policy "
        "call is quicker than a GPU they all share); 'cuda' puts them on the GPU"
    ]
