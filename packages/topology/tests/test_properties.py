"""Property tests: for every valid input the plan's invariants hold, and no invalid input yields a plan."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastsac_topology import (
    CPU_POLICY_MAX_ENV_BYTES,
    TopologyError,
    TrainerTopology,
    resolve_trainer_topology,
)
from numa_bind import GpuLocality, HostLayout, NumaNode


@st.composite
def hosts(draw: st.DrawFn) -> HostLayout:
    """1-4 nodes of 0-12 CPUs (some memory-less), an allowed subset, 0-8 GPUs of known or unknown locality."""
    sizes = draw(st.lists(st.integers(0, 12), min_size=1, max_size=4))
    if draw(st.booleans()):
        sizes = [max(size, 4) for size in sizes]
    nodes, start = [], 0
    for node_id, size in enumerate(sizes):
        memory = draw(st.sampled_from([0, 1 << 34, 1 << 34, 1 << 34]))
        nodes.append(NumaNode(id=node_id, cpus=tuple(range(start, start + size)), memory_bytes=memory))
        start += size
    every = list(range(start))
    allowed = every if draw(st.booleans()) else sorted(draw(st.sets(st.sampled_from(every)))) if every else []
    localities = [None, *range(len(sizes))] * 2 + [*range(len(sizes))]  # known locality more often
    gpu_nodes = draw(st.lists(st.sampled_from(localities), max_size=8))
    gpus = tuple(
        GpuLocality(
            cuda_index=index,
            pci_bus_id=None,
            numa_node=node,
            local_cpus=None,
            source="unknown" if node is None else "sysfs",
        )
        for index, node in enumerate(gpu_nodes)
    )
    return HostLayout(nodes=tuple(nodes), allowed_cpus=tuple(allowed), gpus=gpus)


@st.composite
def valid_requests(draw: st.DrawFn) -> dict[str, Any]:
    """Requests whose counts and devices are valid (the CPU budget may still not fit)."""
    host = draw(hosts())
    num_cuda = len(host.gpus)
    num_learners = draw(st.integers(1, 4))
    num_collectors = num_learners * draw(st.integers(1, 4))
    use_cuda = num_cuda >= num_learners and draw(st.sampled_from([True, True, False]))
    if use_cuda and draw(st.booleans()):
        first = draw(st.integers(0, num_cuda - num_learners))
        trainer_device, learner_devices = f"cuda:{first}", None
    elif use_cuda:
        chosen = draw(st.permutations(range(num_cuda)))[:num_learners]
        trainer_device, learner_devices = "cuda", [f"cuda:{index}" for index in chosen]
    else:
        trainer_device, learner_devices = "cpu", draw(st.sampled_from([None, ["cpu"] * num_learners]))
    inference = (
        ["auto", "cpu"] + [f"cuda:{index}" for index in range(num_cuda)] + (["cuda"] if use_cuda else [])
    )
    return {
        "num_envs": num_collectors * draw(st.integers(1, 8)),
        "num_collectors": num_collectors,
        "num_learners": num_learners,
        "batch_size": num_learners * draw(st.integers(1, 64)),
        "trainer_device": trainer_device,
        "learner_devices": learner_devices,
        "num_cuda_devices": num_cuda,
        "collector_inference_device": draw(st.sampled_from(inference)),
        "cpus_per_collector": draw(st.one_of(st.none(), st.integers(1, 3))),
        "cpus_per_learner": draw(st.integers(1, 3)),
        "transition_ipc": draw(st.sampled_from(["auto", "on", "off"])),
        "weight_ipc": draw(st.sampled_from(["auto", "on", "off"])),
        "weight_ipc_min_bytes": draw(st.integers(0, 2000)),
        "actor_param_bytes": draw(actor_bytes()),
        "host": host,
    }


def actor_bytes() -> st.SearchStrategy[int]:
    """Small actors, and actors whose policy call (1-8 envs each) lies about the CPU bound of 'auto'."""
    edge = CPU_POLICY_MAX_ENV_BYTES
    return st.one_of(st.integers(0, 2000), st.integers(edge // 8 - 3, edge + 3))


def _expected_inference(request: dict[str, Any], owner_device: str, width: int) -> str:
    """Where a collector infers, computed independently of the resolver."""
    spec = request["collector_inference_device"]
    if spec == "auto":
        ipc_on = "on" in (request["transition_ipc"], request["weight_ipc"])
        small = width * request["actor_param_bytes"] <= CPU_POLICY_MAX_ENV_BYTES
        return "cpu" if small and not ipc_on else owner_device
    return owner_device if spec == "cuda" else spec


def _expected_node(host: HostLayout, device: str) -> int | None:
    """The node a learner must bind to, computed independently of the resolver."""
    if not host.is_multi_node or device == "cpu":
        return None
    gpu = host.gpu(int(device.split(":")[1]))
    if gpu is None or gpu.numa_node is None:
        return None
    node = gpu.numa_node
    return node if host.node(node).memory_bytes > 0 and host.allowed_cpus_of(node) else None


def _check_invariants(plan: TrainerTopology, request: dict[str, Any]) -> None:
    host: HostLayout = request["host"]
    per_rank = request["num_collectors"] // request["num_learners"]
    width = request["num_envs"] // request["num_collectors"]
    assert [lr.rank for lr in plan.learners] == list(range(request["num_learners"]))
    assert [c.index for c in plan.collectors] == list(range(request["num_collectors"]))
    assert plan.env_shards() == tuple((i * width, (i + 1) * width) for i in range(request["num_collectors"]))
    for collector in plan.collectors:
        assert collector.owner_rank == collector.index // per_rank
        assert collector.numa_node == plan.learners[collector.owner_rank].numa_node
        owner = plan.learners[collector.owner_rank].device
        assert collector.inference_device == _expected_inference(request, owner, width)
    on_cpus = any(c.inference_device == "cpu" for c in plan.collectors)
    auto_note = any(note.startswith("collector_inference_device='auto'") for note in plan.notes)
    gpu_learners = any(lr.device != "cpu" for lr in plan.learners)
    assert auto_note == (request["collector_inference_device"] == "auto" and gpu_learners and on_cpus)
    for learner in plan.learners:
        assert learner.numa_node == _expected_node(host, learner.device)
    allowed = set(host.allowed_cpus)
    placed = [*plan.learners, *plan.collectors]
    for item in placed:
        if item.cpus is not None:
            assert item.cpus and set(item.cpus) <= allowed
            if item.numa_node is not None:
                assert set(item.cpus) <= set(host.node(item.numa_node).cpus)
    learner_sets = [set(lr.cpus) for lr in plan.learners if lr.cpus is not None]
    collector_sets = [set(c.cpus) for c in plan.collectors if c.cpus is not None]
    for i, cpus in enumerate(learner_sets):
        assert all(not cpus & other for other in learner_sets[i + 1 :])
        assert all(not cpus & other for other in collector_sets)
    for learner in plan.learners:
        if learner.numa_node is not None or request["cpus_per_collector"] is not None:
            assert learner.cpus is not None and len(learner.cpus) == request["cpus_per_learner"]
    if request["cpus_per_collector"] is not None:
        assert len(collector_sets) == len(plan.collectors)
        assert all(len(cpus) == request["cpus_per_collector"] for cpus in collector_sets)
        for i, cpus in enumerate(collector_sets):
            assert all(not cpus & other for other in collector_sets[i + 1 :])
    for learner in plan.learners:
        mine = plan.collectors_of(learner.rank)
        assert len({(c.transition_transport, c.weight_transport) for c in mine}) == 1
        possible = learner.device != "cpu" and all(c.inference_device == learner.device for c in mine)
        expected_transition = "cuda_ipc" if possible and request["transition_ipc"] != "off" else "host"
        big = request["actor_param_bytes"] >= request["weight_ipc_min_bytes"]
        weights_on = request["weight_ipc"] == "on" or (request["weight_ipc"] == "auto" and big)
        assert mine[0].transition_transport == expected_transition
        assert mine[0].weight_transport == ("cuda_ipc" if possible and weights_on else "host")
        if request["transition_ipc"] == "on" and not possible:
            assert any(note.startswith(f"transition_ipc='on' but rank {learner.rank}") for note in plan.notes)
    assert len(plan.render().splitlines()) == len(plan.learners) + len(plan.collectors) + 3 + len(plan.notes)


@st.composite
def numa_requests(draw: st.DrawFn) -> dict[str, Any]:
    """Valid requests on multi-node hosts whose GPUs all have a known node: the NUMA-bound, pinned case."""
    sizes = draw(st.lists(st.integers(6, 16), min_size=2, max_size=4))
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    nodes = tuple(
        NumaNode(id=i, cpus=tuple(range(start, start + size)), memory_bytes=1 << 34)
        for i, (start, size) in enumerate(zip(starts, sizes, strict=True))
    )
    gpu_nodes = draw(st.lists(st.integers(0, len(sizes) - 1), min_size=1, max_size=8))
    gpus = tuple(
        GpuLocality(cuda_index=i, pci_bus_id=None, numa_node=node, local_cpus=None, source="nvml")
        for i, node in enumerate(gpu_nodes)
    )
    host = HostLayout(nodes=nodes, allowed_cpus=tuple(range(sum(sizes))), gpus=gpus)
    request = draw(valid_requests())
    num_learners = draw(st.integers(1, len(gpus)))
    num_collectors = num_learners * draw(st.integers(1, 3))
    chosen = draw(st.permutations(range(len(gpus))))[:num_learners]
    return request | {
        "host": host,
        "num_learners": num_learners,
        "num_collectors": num_collectors,
        "num_envs": num_collectors * 4,
        "batch_size": num_learners * 32,
        "trainer_device": "cuda",
        "learner_devices": [f"cuda:{index}" for index in chosen],
        "num_cuda_devices": len(gpus),
        "collector_inference_device": draw(st.sampled_from(["auto", "cuda", "cpu", "cuda:0"])),
        "cpus_per_collector": draw(st.one_of(st.none(), st.integers(1, 2))),
        "cpus_per_learner": draw(st.integers(1, 2)),
    }


@settings(max_examples=150, deadline=None)
@given(numa_requests())
def test_numa_bound_requests_keep_the_invariants(request: dict[str, Any]) -> None:
    """On NUMA hosts with known GPU locality, bound and pinned plans keep every invariant (or lack CPUs)."""
    _resolve_and_check(request)


@settings(max_examples=300, deadline=None)
@given(valid_requests())
def test_valid_requests_keep_the_invariants(request: dict[str, Any]) -> None:
    """Every valid request yields a plan keeping the invariants, or a CPU-budget error if CPUs run short."""
    _resolve_and_check(request)


def _resolve_and_check(request: dict[str, Any]) -> None:
    try:
        plan = resolve_trainer_topology(**request)
    except TopologyError as error:
        assert "CPU(s) for" in str(error)
        host = request["host"]
        if request["cpus_per_collector"] is None:  # then only bound learners can run short
            nodes = [_expected_node(host, device) for device in _devices(request)]
            assert any(
                nodes.count(node) * request["cpus_per_learner"] > len(host.allowed_cpus_of(node))
                for node in set(nodes) - {None}
            )
        return
    _check_invariants(plan, request)


def _devices(request: dict[str, Any]) -> list[str]:
    if request["learner_devices"] is not None:
        return [device if device != "cuda" else "cuda:0" for device in request["learner_devices"]]
    device = request["trainer_device"]
    if device == "cpu":
        return ["cpu"] * request["num_learners"]
    first = 0 if device == "cuda" else int(device.split(":")[1])
    return [f"cuda:{first + rank}" for rank in range(request["num_learners"])]


@settings(max_examples=300, deadline=None)
@given(
    num_envs=st.integers(-2, 200),
    num_collectors=st.integers(-2, 24),
    num_learners=st.integers(-2, 6),
    batch_size=st.integers(-2, 300),
)
def test_invalid_counts_never_yield_a_plan(
    num_envs: int, num_collectors: int, num_learners: int, batch_size: int
) -> None:
    """A plan comes back exactly when all counts are positive and env, collector and batch splits are even."""
    valid = (
        min(num_envs, num_collectors, num_learners, batch_size) >= 1
        and num_envs % num_collectors == 0
        and num_collectors % num_learners == 0
        and batch_size % num_learners == 0
    )
    request = {
        "num_envs": num_envs,
        "num_collectors": num_collectors,
        "num_learners": num_learners,
        "batch_size": batch_size,
        "trainer_device": "cpu",
        "learner_devices": None,
        "num_cuda_devices": 0,
        "collector_inference_device": "auto",
        "cpus_per_collector": None,
        "transition_ipc": "auto",
        "weight_ipc": "auto",
        "weight_ipc_min_bytes": 0,
        "actor_param_bytes": 0,
        "host": HostLayout(nodes=(NumaNode(id=0, cpus=(0, 1), memory_bytes=1),), allowed_cpus=(0, 1)),
    }
    if valid:
        plan = resolve_trainer_topology(**request)
        assert len(plan.collectors) == num_collectors
    else:
        with pytest.raises(TopologyError):
            resolve_trainer_topology(**request)
