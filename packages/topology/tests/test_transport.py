"""Transport choice: CUDA IPC per rank all or nothing, 'on' falls back with a reason, the weight size gate."""

from __future__ import annotations

from collections.abc import Callable

from fastsac_topology import TrainerTopology
from fastsac_topology._transport import choose_transports

Resolve = Callable[..., TrainerTopology]

GPU2 = {
    "learner_devices": ["cuda:0", "cuda:1"],
    "num_cuda_devices": 2,
    "num_learners": 2,
    "num_collectors": 4,
    "collector_inference_device": "cuda",
}


def _per_rank(plan: TrainerTopology) -> list[tuple[str, str]]:
    return [
        (plan.collectors_of(rank)[0].transition_transport, plan.collectors_of(rank)[0].weight_transport)
        for rank in range(len(plan.learners))
    ]


def test_auto_uses_ipc_when_collectors_infer_on_the_learner_gpu(resolve: Resolve) -> None:
    """auto: IPC rings when inference is on the rank's GPU; weight IPC only at or above the size gate."""
    small = resolve(**GPU2, actor_param_bytes=1000, weight_ipc_min_bytes=1000)
    assert _per_rank(small) == [("cuda_ipc", "cuda_ipc")] * 2
    smaller = resolve(**GPU2, actor_param_bytes=999, weight_ipc_min_bytes=1000)
    assert _per_rank(smaller) == [("cuda_ipc", "host")] * 2
    assert smaller.notes == ("one NUMA node: nothing is NUMA-bound",)


def test_on_ignores_the_size_gate(resolve: Resolve) -> None:
    """weight_ipc='on' uses IPC for any actor size when the layout allows it."""
    plan = resolve(**GPU2, weight_ipc="on", actor_param_bytes=1, weight_ipc_min_bytes=1 << 30)
    assert _per_rank(plan) == [("cuda_ipc", "cuda_ipc")] * 2


def test_off_is_host(resolve: Resolve) -> None:
    """off: host transports even when IPC would be possible."""
    plan = resolve(**GPU2, transition_ipc="off", weight_ipc="off", actor_param_bytes=1 << 30)
    assert _per_rank(plan) == [("host", "host")] * 2


def test_other_gpu_inference_is_host_per_rank(resolve: Resolve) -> None:
    """Collectors inferring on cuda:1 give rank 1 IPC and rank 0 host; 'on' says why rank 0 fell back."""
    plan = resolve(**(GPU2 | {"collector_inference_device": "cuda:1"}), transition_ipc="on", weight_ipc="on")
    assert _per_rank(plan) == [("host", "host"), ("cuda_ipc", "cuda_ipc")]
    assert (
        "transition_ipc='on' but rank 0's collector(s) 0 (cuda:1), 1 (cuda:1) do not infer on its cuda:0: "
        "rank 0 uses host rings"
    ) in plan.notes
    assert any(note.startswith("weight_ipc='on' but rank 0's collector(s)") for note in plan.notes)
    assert not any("rank 1" in note for note in plan.notes)


def test_cpu_learners_never_use_ipc(resolve: Resolve) -> None:
    """A CPU learner uses host transports even with 'on', and the note says it learns on cpu."""
    plan = resolve(transition_ipc="on", weight_ipc="on", num_collectors=2)
    assert _per_rank(plan) == [("host", "host")]
    assert "transition_ipc='on' but rank 0 learns on cpu: rank 0 uses host rings" in plan.notes


def test_mixed_inference_within_a_rank_is_all_or_nothing() -> None:
    """If one collector of a rank infers elsewhere, none of that rank's collectors gets IPC."""
    chosen, notes = choose_transports(
        devices=["cuda:0", "cuda:1"],
        collector_devices=["cuda:0", "cpu", "cuda:1", "cuda:1"],
        owners=[0, 0, 1, 1],
        transition_ipc="auto",
        weight_ipc="auto",
        weight_ipc_min_bytes=0,
        actor_param_bytes=0,
    )
    assert chosen == [("host", "host"), ("cuda_ipc", "cuda_ipc")]
    assert notes == []
