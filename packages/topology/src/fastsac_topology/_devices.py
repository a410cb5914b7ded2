"""Device specs: the learner device list and each collector's inference device.

The one home of the device rules: an app checks its ``learner_devices`` with
:func:`check_learner_devices` and words the error with its key path (``TopologyError.setting``,
``value``, ``fix``). Every device error here is ``TopologyError.of_setting``: it names the setting, the
value seen and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastsac_topology.exceptions import TopologyError

__all__ = [
    "CPU_POLICY_MAX_ENV_BYTES",
    "check_learner_devices",
    "cuda_index",
    "expand_learner_devices",
    "inference_device",
    "policy_fits_a_core",
]

CPU_POLICY_MAX_ENV_BYTES = 64 * 1_396_360
"""The largest policy call that ``collector_inference_device=auto`` leaves on a collector's own CPU:
envs per collector times the actor's float32 parameter bytes (a forward pass costs about as much per
env as per parameter), here 64 envs of Humanoid's actor (1,396,360 bytes).

Measured on an h100 host, Humanoid's actor on one core against the GPU, alone on the machine
(``benchmarks/collector_policy.py``, wiki/benchmarks.md): the CPU's call is 0.53, 0.65, 0.99, 1.59 ms
for 16, 32, 64, 128 envs, the GPU's a flat 0.92-1.06 ms; in a run, where 14 collectors share the GPU,
its call took 2.4-2.65 ms at 32 envs against 1.03 ms on the collector's core. Up to 64 envs the core
is level with the GPU alone and ahead of a shared one; beyond, the GPU's flat cost wins."""


def policy_fits_a_core(envs_per_collector: int, actor_param_bytes: int) -> bool:
    """Whether a collector's policy call is small enough for its own CPU: :data:`CPU_POLICY_MAX_ENV_BYTES`."""
    return envs_per_collector * actor_param_bytes <= CPU_POLICY_MAX_ENV_BYTES


def cuda_index(device: str) -> int | None:
    """The index of a normalised ``"cuda:N"`` device, or None for ``"cpu"``."""
    return int(device.split(":", 1)[1]) if device.startswith("cuda:") else None


def _normalise(setting: str, spec: str, num_cuda_devices: int) -> str:
    """``"cpu"`` or ``"cuda:N"`` (``"cuda"`` means ``"cuda:0"``), checked against the device count."""
    text = spec.strip().lower()
    if text == "cpu":
        return "cpu"
    if text == "cuda":
        text = "cuda:0"
    head, _, tail = text.partition(":")
    if head != "cuda" or not tail.isdigit():
        raise TopologyError.of_setting(setting, spec, "it is not a device; use 'cpu', 'cuda' or 'cuda:N'")
    index = int(tail)
    if index >= num_cuda_devices:
        have = f"cuda:0..cuda:{num_cuda_devices - 1}" if num_cuda_devices else "none"
        raise TopologyError.of_setting(
            setting,
            spec,
            f"it names a missing device: this host has {num_cuda_devices} CUDA device(s) ({have}); "
            "use one of them or 'cpu'",
        )
    return f"cuda:{index}"


def check_learner_devices(
    specs: Sequence[str], *, num_learners: int, num_cuda_devices: int
) -> tuple[str, ...]:
    """The learner device list, normalised (``"cuda"`` is ``"cuda:0"``): the one home of its rules.

    Several CPU learners are allowed (e.g. for gloo tests); CUDA learners each need their own GPU.

    Raises:
        TopologyError: A list whose length is not ``num_learners``, a malformed or missing device, a
            CPU/CUDA mix, or a repeated CUDA device; ``setting`` is ``"learner_devices"``, ``value``
            the list (or the one device at fault) and ``fix`` what to change.
    """
    listed = list(specs)
    if len(listed) != num_learners:
        raise TopologyError.of_setting(
            "learner_devices",
            listed,
            f"it has {len(listed)} entries but num_learners={num_learners}; give one device per learner, "
            "or leave learner_devices unset (null) to expand from the trainer's device",
        )
    devices = tuple(_normalise("learner_devices", spec, num_cuda_devices) for spec in listed)
    if len({device == "cpu" for device in devices}) > 1:
        raise TopologyError.of_setting(
            "learner_devices", listed, "it mixes CPU and CUDA learners; use all 'cpu' or all CUDA devices"
        )
    repeated = sorted({device for device in devices if device != "cpu" and devices.count(device) > 1})
    if repeated:
        raise TopologyError.of_setting(
            "learner_devices",
            listed,
            f"it repeats {', '.join(repeated)}; give every CUDA learner its own GPU",
        )
    return devices


def expand_learner_devices(
    *, trainer_device: str, specs: Sequence[str] | None, num_learners: int, num_cuda_devices: int
) -> tuple[str, ...]:
    """The device of every learner rank.

    ``specs`` None expands from the trainer's device: ``cuda:k`` gives ``cuda:k .. cuda:k+n-1``,
    ``cpu`` gives ``cpu`` for every rank (several CPU learners are allowed, e.g. for gloo tests);
    a list is checked by :func:`check_learner_devices`.

    Raises:
        TopologyError: A malformed or missing device, a repeated CUDA device, a CPU/CUDA mix, or a
            list whose length is not ``num_learners`` (``setting`` ``"learner_devices"``); a malformed or
            missing ``trainer_device`` (``"trainer_device"``); more learners from ``trainer_device`` on
            than GPUs from it on (``"num_learners"``).
    """
    if specs is not None:
        return check_learner_devices(specs, num_learners=num_learners, num_cuda_devices=num_cuda_devices)
    first = _normalise("trainer_device", trainer_device, num_cuda_devices)
    start = cuda_index(first)
    if start is None:
        return ("cpu",) * num_learners
    if start + num_learners > num_cuda_devices:
        fits = num_cuda_devices - start
        if num_learners <= num_cuda_devices:
            listed = [f"cuda:{index}" for index in range(num_learners)]
            fix = f"use num_learners <= {fits}, or list learner_devices (e.g. {listed})"
        else:
            fix = f"use num_learners <= {fits}: every CUDA learner needs its own GPU"
        raise TopologyError.of_setting(
            "num_learners",
            num_learners,
            f"from the trainer's device {trainer_device!r} the learners need cuda:{start}.."
            f"cuda:{start + num_learners - 1}, but this host has {num_cuda_devices} CUDA device(s); {fix}",
        )
    return tuple(f"cuda:{start + rank}" for rank in range(num_learners))


def inference_device(
    spec: str,
    owner_device: str,
    num_cuda_devices: int,
    *,
    envs_per_collector: int,
    actor_param_bytes: int,
    ipc_requested: bool,
) -> str:
    """Where a collector owned by a learner on ``owner_device`` runs its policy.

    ``"auto"`` is the collector's CPU when its owner learns on a GPU but the call is small
    (:func:`policy_fits_a_core`: one core is faster than a GPU every collector shares) and no CUDA-IPC
    transport was asked for (``ipc_requested``: ``"on"``, which needs collectors on the GPU); otherwise
    the owner's device. ``"cuda"`` is the owner's GPU; ``"cuda:N"`` and ``"cpu"`` are taken as given.

    Raises:
        TopologyError: ``"cuda"`` with a CPU owner or without CUDA, or a malformed/missing device;
            ``setting`` is ``"collector_inference_device"`` and ``value`` is ``spec``.
    """
    setting = "collector_inference_device"
    text = spec.strip().lower()
    if text == "auto":
        on_core = not ipc_requested and policy_fits_a_core(envs_per_collector, actor_param_bytes)
        return "cpu" if on_core else owner_device
    if text == "cuda":
        if num_cuda_devices == 0:
            raise TopologyError.of_setting(setting, spec, "this host has no CUDA device; use 'cpu' or 'auto'")
        if owner_device == "cpu":
            raise TopologyError.of_setting(
                setting,
                spec,
                "it means the owner learner's GPU, but the learners run on cpu; "
                "use 'cpu', 'auto' or an explicit 'cuda:N'",
            )
        return owner_device
    return _normalise(setting, spec, num_cuda_devices)
