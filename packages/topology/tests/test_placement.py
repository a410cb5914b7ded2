"""NUMA and CPU placement on synthetic hosts (Note [CPU placement] in fastsac_topology._cpus)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastsac_topology import CPU_POLICY_MAX_ENV_BYTES, TrainerTopology, policy_fits_a_core

Resolve = Callable[..., TrainerTopology]
Host = Callable[..., Any]


def test_one_node_one_gpu_binds_nothing(resolve: Resolve, host: Host) -> None:
    """On a one-node host nothing is NUMA-bound and, without cpus_per_collector, nothing is pinned."""
    plan = resolve(
        host=host([range(16)], [None]), trainer_device="cuda", num_cuda_devices=1, num_collectors=4
    )
    assert [lr.numa_node for lr in plan.learners] == [None]
    assert [lr.cpus for lr in plan.learners] == [None]
    assert {(c.numa_node, c.cpus) for c in plan.collectors} == {(None, None)}
    assert "one NUMA node: nothing is NUMA-bound" in plan.notes


def test_one_node_with_cpus_per_collector_pins_everyone(resolve: Resolve, host: Host) -> None:
    """With cpus_per_collector on one node: the learner takes the first CPUs, collectors disjoint slices."""
    plan = resolve(
        host=host([range(16)], [None]),
        trainer_device="cuda",
        num_cuda_devices=1,
        num_collectors=4,
        cpus_per_collector=3,
    )
    assert plan.learners[0].cpus == (0, 1)
    assert [c.cpus for c in plan.collectors] == [(2, 3, 4), (5, 6, 7), (8, 9, 10), (11, 12, 13)]
    assert {c.numa_node for c in plan.collectors} == {None}


def test_two_sockets_two_gpus_use_node_local_ordinals(resolve: Resolve, host: Host) -> None:
    """Learners bind to their GPU's node; collectors carve their owner's node by their index within it."""
    plan = resolve(
        host=host([range(16), range(16, 32)], [0, 1]),
        trainer_device="cuda",
        num_cuda_devices=2,
        num_learners=2,
        num_collectors=4,
        cpus_per_collector=2,
    )
    assert [(lr.device, lr.numa_node, lr.cpus) for lr in plan.learners] == [
        ("cuda:0", 0, (0, 1)),
        ("cuda:1", 1, (16, 17)),
    ]
    assert [(c.owner_rank, c.numa_node, c.cpus) for c in plan.collectors] == [
        (0, 0, (2, 3)),
        (0, 0, (4, 5)),
        (1, 1, (18, 19)),  # first collector of node 1: a global index would give 22-23
        (1, 1, (20, 21)),
    ]


def test_two_sockets_eight_gpus_share_node_pools(resolve: Resolve, host: Host) -> None:
    """Eight GPUs on two sockets: four learners per node; collectors without a CPU count share the rest."""
    plan = resolve(
        host=host([range(32), range(32, 64)], [0, 0, 0, 0, 1, 1, 1, 1]),
        trainer_device="cuda",
        num_cuda_devices=8,
        num_learners=8,
        num_collectors=16,
        batch_size=8192,
    )
    assert [lr.numa_node for lr in plan.learners] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [lr.cpus for lr in plan.learners[:4]] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert plan.learners[4].cpus == (32, 33)
    node0 = {c.cpus for c in plan.collectors if c.numa_node == 0}
    assert node0 == {tuple(range(8, 32))}
    assert [c.numa_node for c in plan.collectors] == [0] * 8 + [1] * 8
    assert [c.owner_rank for c in plan.collectors] == [rank for rank in range(8) for _ in range(2)]


def test_two_sockets_gpus_on_one_node(resolve: Resolve, host: Host) -> None:
    """Learners on the same node get disjoint CPU sets; their collectors carve what is left of that node."""
    plan = resolve(
        host=host([range(8), range(8, 16)], [1, 1]),
        trainer_device="cuda",
        num_cuda_devices=2,
        num_learners=2,
        num_collectors=4,
        cpus_per_collector=1,
    )
    assert [lr.cpus for lr in plan.learners] == [(8, 9), (10, 11)]
    assert [c.cpus for c in plan.collectors] == [(12,), (13,), (14,), (15,)]


def test_four_nodes_unknown_gpu_locality(resolve: Resolve, host: Host) -> None:
    """GPUs of unknown locality bind nothing, and every rank says why."""
    plan = resolve(
        host=host([range(0, 4), range(4, 8), range(8, 12), range(12, 16)], [None] * 4),
        trainer_device="cuda",
        num_cuda_devices=4,
        num_learners=4,
        num_collectors=4,
    )
    assert {lr.numa_node for lr in plan.learners} == {None}
    assert {c.numa_node for c in plan.collectors} == {None}
    for rank in range(4):
        assert (
            f"rank {rank}: NUMA locality of cuda:{rank} is unknown; it and its collectors are not NUMA-bound"
            in (plan.notes)
        )


def test_gpu_on_memoryless_node_is_not_bound(resolve: Resolve, host: Host) -> None:
    """A GPU local to a node without memory binds nothing (memory binding there would fail) and says so."""
    plan = resolve(
        host=host([range(4), range(4, 8)], [1], memory=[1 << 30, 0]),
        trainer_device="cuda",
        num_cuda_devices=1,
    )
    assert plan.learners[0].numa_node is None
    assert any("node 1, which has no memory or no CPUs" in note for note in plan.notes)


def test_more_collectors_than_cores(resolve: Resolve, host: Host) -> None:
    """More collectors than CPUs is allowed unpinned (with a note); pinned it is an error (test_errors)."""
    plan = resolve(host=host([range(2)]), num_envs=64, num_collectors=8)
    assert {c.cpus for c in plan.collectors} == {None}
    assert "8 unbound collectors on 2 allowed CPU(s): they are not pinned and will share cores" in plan.notes


def test_allowed_cpus_restrict_bound_placement(resolve: Resolve, host: Host) -> None:
    """Only allowed CPUs (e.g. a container's cpuset) are handed out."""
    plan = resolve(
        host=host([range(8), range(8, 16)], [1], allowed=[0, 1, 9, 11, 12, 13, 15]),
        trainer_device="cuda",
        num_cuda_devices=1,
        num_collectors=2,
        cpus_per_collector=1,
    )
    assert plan.learners[0].cpus == (9, 11)
    assert [c.cpus for c in plan.collectors] == [(12,), (13,)]


def test_cpu_learners_on_two_sockets(resolve: Resolve, host: Host) -> None:
    """Several CPU learners are allowed; CPU learners are never NUMA-bound."""
    plan = resolve(
        host=host([range(8), range(8, 16)]), num_envs=48, num_learners=3, num_collectors=3, batch_size=300
    )
    assert [lr.device for lr in plan.learners] == ["cpu", "cpu", "cpu"]
    assert {lr.numa_node for lr in plan.learners} == {None}
    assert "learners run on cpu: nothing is NUMA-bound" in plan.notes


def test_learner_devices_expand_from_trainer_device(resolve: Resolve) -> None:
    """learner_devices None expands to consecutive GPUs from the trainer's; 'cuda' means cuda:0."""
    plan = resolve(
        trainer_device="cuda:1",
        num_cuda_devices=4,
        num_envs=48,
        num_learners=3,
        num_collectors=3,
        batch_size=300,
    )
    assert [lr.device for lr in plan.learners] == ["cuda:1", "cuda:2", "cuda:3"]
    listed = resolve(learner_devices=["cuda:3", "CUDA"], num_cuda_devices=4, num_learners=2, num_collectors=2)
    assert [lr.device for lr in listed.learners] == ["cuda:3", "cuda:0"]


def test_inference_device_choices(resolve: Resolve) -> None:
    """'auto' and 'cuda' follow the owner's device (a large policy call); 'cuda:N' and 'cpu' are as given."""
    common = {
        "learner_devices": ["cuda:0", "cuda:1"],
        "num_cuda_devices": 2,
        "num_learners": 2,
        "num_collectors": 4,
        "actor_param_bytes": CPU_POLICY_MAX_ENV_BYTES,  # 16 envs each: 16 times the bound
    }
    auto = resolve(collector_inference_device="auto", **common)
    assert [c.inference_device for c in auto.collectors] == ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]
    assert not any("collector_inference_device" in note for note in auto.notes)
    cuda = resolve(collector_inference_device="cuda", **common)
    assert [c.inference_device for c in cuda.collectors] == ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]
    fixed = resolve(collector_inference_device="cuda:1", **common)
    assert {c.inference_device for c in fixed.collectors} == {"cuda:1"}
    cpu = resolve(collector_inference_device="cpu", **common)
    assert {c.inference_device for c in cpu.collectors} == {"cpu"}
    on_cpu = resolve(num_collectors=2)
    assert {c.inference_device for c in on_cpu.collectors} == {"cpu"}
    assert not any("collector_inference_device" in note for note in on_cpu.notes)


def test_auto_puts_a_small_policy_call_on_the_collectors_cpu(resolve: Resolve) -> None:
    """'auto' with GPU learners: CPU inference up to the bound (with a note saying so), the GPU past it."""
    gpu = {"trainer_device": "cuda", "num_cuda_devices": 1, "num_collectors": 4, "num_envs": 64}
    at = resolve(**gpu, actor_param_bytes=CPU_POLICY_MAX_ENV_BYTES // 16)  # 16 envs each: at the bound
    assert {c.inference_device for c in at.collectors} == {"cpu"}
    assert {(c.transition_transport, c.weight_transport) for c in at.collectors} == {("host", "host")}
    assert (
        "collector_inference_device='auto': the collectors infer on their CPUs (16 envs each: one core's "
        "policy call is quicker than a GPU they all share); 'cuda' puts them on the GPU"
    ) in at.notes
    past = resolve(**gpu, actor_param_bytes=CPU_POLICY_MAX_ENV_BYTES // 16 + 1)
    assert {c.inference_device for c in past.collectors} == {"cuda:0"}
    assert {c.transition_transport for c in past.collectors} == {"cuda_ipc"}
    assert policy_fits_a_core(16, CPU_POLICY_MAX_ENV_BYTES // 16)
    assert not policy_fits_a_core(16, CPU_POLICY_MAX_ENV_BYTES // 16 + 1)
    assert policy_fits_a_core(64, 1_396_360), "Humanoid's actor, 64 envs: the bound's own example"


def test_auto_keeps_collectors_on_the_gpu_when_ipc_is_asked_for(resolve: Resolve) -> None:
    """A CUDA-IPC transport set to 'on' needs collectors on the GPU: 'auto' leaves them there."""
    gpu = {"trainer_device": "cuda", "num_cuda_devices": 1, "num_collectors": 2, "actor_param_bytes": 10}
    for asked in ({"transition_ipc": "on"}, {"weight_ipc": "on"}):
        plan = resolve(**gpu, **asked)
        assert {c.inference_device for c in plan.collectors} == {"cuda:0"}, asked
        assert {c.transition_transport for c in plan.collectors} == {"cuda_ipc"}, asked
    assert {c.inference_device for c in resolve(**gpu, transition_ipc="off").collectors} == {"cpu"}


def test_shards_and_owners(resolve: Resolve) -> None:
    """Shards are equal, contiguous and ascending; owners are contiguous blocks; helpers agree."""
    plan = resolve(num_envs=96, num_collectors=6, num_learners=3, batch_size=300)
    assert plan.num_envs_per_collector == 16
    assert plan.env_shards() == tuple((i * 16, (i + 1) * 16) for i in range(6))
    assert [plan.collector_owner(i) for i in range(6)] == [0, 0, 1, 1, 2, 2]
    assert [c.index for c in plan.collectors_of(1)] == [2, 3]
