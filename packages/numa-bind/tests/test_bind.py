"""Binding: argument errors in-process; the real syscalls on this machine's node 0 in spawned children."""

from __future__ import annotations

import errno
import inspect
import logging
import multiprocessing
import os
import platform
import sys
from typing import Any

import pytest

import numa_bind
from numa_bind import (
    BindingError,
    MemPolicy,
    bind_current_process,
    binding_supported,
    bound_for_child,
    current_mempolicy,
    discover_host,
)
from numa_bind import _bind as bind_module
from numa_bind._probe import bind_and_report, report_inherited
from numa_bind._syscalls import MempolicySyscalls

_SPAWN = multiprocessing.get_context("spawn")
_TIMEOUT_S = 60.0

linux_only = pytest.mark.skipif(not binding_supported(), reason="binding needs Linux on x86-64 or aarch64")


def _run_child(target: Any, *args: Any) -> dict[str, Any]:
    queue = _SPAWN.Queue()
    child = _SPAWN.Process(target=target, args=(queue, *args))
    child.start()
    try:
        report: dict[str, Any] = queue.get(timeout=_TIMEOUT_S)
    finally:
        child.join(_TIMEOUT_S)
        if child.is_alive():
            child.kill()
            child.join(_TIMEOUT_S)
        queue.close()
        queue.join_thread()
    assert child.exitcode == 0
    return report


def _node0_cpu() -> int:
    layout = discover_host(with_gpus=False)
    cpus = layout.allowed_cpus_of(layout.nodes[0].id)
    if not cpus:
        pytest.skip("this process may not run on node 0's CPUs")
    return cpus[0]


def test_binding_supported_matches_platform() -> None:
    """binding_supported is True exactly on Linux x86-64/aarch64."""
    expected = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64")
    assert binding_supported() == expected


def test_unknown_cpu_is_refused_with_allowed_set() -> None:
    """A CPU outside the allowed set raises BindingError naming the CPU and the allowed CPUs."""
    bad = max(os.sched_getaffinity(0)) + 4096
    with pytest.raises(BindingError, match=rf"cpus={bad} cannot be bound: allowed cpus are \d") as caught:
        bind_current_process(cpus=[bad])
    assert caught.value.bad == (bad,)
    assert caught.value.allowed


def test_unknown_node_is_refused_with_allowed_set() -> None:
    """A nonexistent NUMA node raises BindingError naming the node and the allowed nodes."""
    with pytest.raises(BindingError, match=r"nodes=1000 cannot be bound: allowed nodes are 0"):
        bind_current_process(nodes=[1000])


def test_negative_ids_are_refused_as_binding_errors() -> None:
    """A negative CPU or node id raises BindingError naming it (not a CPU-list parse error)."""
    with pytest.raises(BindingError, match=r"cpus=-1 cannot be bound"):
        bind_current_process(cpus=[-1])
    with pytest.raises(BindingError, match=r"nodes=-1 cannot be bound"):
        bind_current_process(nodes=[-1])


@pytest.mark.parametrize("cpus", ["0-1", 0, [0, "1"], [True]])
def test_ids_of_the_wrong_type_are_refused_with_the_fix(cpus: Any) -> None:
    """A string, a lone number or a non-integer id raises TypeError naming integer ids and parse_cpulist."""
    with pytest.raises(TypeError, match=r"pass cpus as integer ids.*parse_cpulist"):
        bind_current_process(cpus=cpus)


def test_empty_sets_are_refused() -> None:
    """An empty CPU or node set is an error (None, not empty, means 'leave alone')."""
    with pytest.raises(BindingError, match="at least one"):
        bind_current_process(cpus=[])
    with pytest.raises(BindingError, match="at least one"):
        bind_current_process(nodes=[])


def test_preferred_takes_one_node() -> None:
    """policy='preferred' with two nodes is refused before anything is applied."""
    with pytest.raises(BindingError, match="takes one node"):
        bind_current_process(nodes=[0, 1], policy="preferred")


def test_unknown_policy_is_refused() -> None:
    """A policy other than bind/preferred/interleave raises ValueError naming the choices."""
    with pytest.raises(ValueError, match="use 'bind', 'preferred' or 'interleave'"):
        bind_current_process(nodes=[0], policy="membind")  # type: ignore[arg-type]


def test_nothing_requested_applies_nothing() -> None:
    """Without cpus and nodes, nothing is applied and the result says so."""
    result = bind_current_process()
    assert (result.cpus_applied, result.memory_applied, result.reason) == (False, False, "nothing requested")


@linux_only
@pytest.mark.parametrize("policy", ["bind", "preferred", "interleave"])
def test_child_binds_to_node0(policy: str) -> None:
    """In a spawned child, binding to node 0 sets all threads' affinity, the policy and a new page's node."""
    cpu = _node0_cpu()
    report = _run_child(bind_and_report, (cpu,), (0,), policy)
    if not report["memory_applied"]:
        pytest.skip(f"the kernel refuses memory policy here: {report['reason']}")
    assert report["cpus_applied"] and report["reason"] is None
    assert report["cpus"] == (cpu,)
    assert report["thread_cpus"] == (cpu,)
    assert (report["mode"], report["nodes"]) == (policy, (0,))
    assert report["page_node"] == 0


@linux_only
def test_current_mempolicy_of_fresh_child_is_default() -> None:
    """A child started outside bound_for_child inherits the default policy and the parent's affinity."""
    report = _run_child(report_inherited)
    assert (report["mode"], report["nodes"]) == ("default", ())
    assert report["cpus"] == tuple(sorted(os.sched_getaffinity(0)))


@linux_only
def test_bound_for_child_binds_child_and_restores_parent() -> None:
    """A child started inside bound_for_child inherits the binding; afterwards the parent is as before."""
    cpu = _node0_cpu()
    before_cpus = os.sched_getaffinity(0)
    before_policy = current_mempolicy()
    queue = _SPAWN.Queue()
    child = _SPAWN.Process(target=report_inherited, args=(queue,))
    with bound_for_child(cpus=[cpu], nodes=[0], policy="interleave") as result:
        assert current_mempolicy() == MemPolicy(mode="interleave", nodes=(0,))
        child.start()
    try:
        report = queue.get(timeout=_TIMEOUT_S)
    finally:
        child.join(_TIMEOUT_S)
        queue.close()
        queue.join_thread()
    assert os.sched_getaffinity(0) == before_cpus
    assert current_mempolicy() == before_policy
    if not result.memory_applied:
        pytest.skip(f"the kernel refuses memory policy here: {result.reason}")
    assert report["cpus"] == (cpu,)
    assert (report["mode"], report["nodes"]) == ("interleave", (0,))
    assert report["page_node"] == 0


@linux_only
def test_bound_for_child_restores_after_an_error() -> None:
    """If the block raises, the parent's affinity and policy are still restored."""
    cpu = _node0_cpu()
    before = (os.sched_getaffinity(0), current_mempolicy())
    with pytest.raises(RuntimeError, match="boom"), bound_for_child(cpus=[cpu], nodes=[0]):
        raise RuntimeError("boom")
    assert (os.sched_getaffinity(0), current_mempolicy()) == before


class _RefusingSyscalls(MempolicySyscalls):
    """The kernel's answer inside a container without CAP_SYS_NICE: set_mempolicy fails with EPERM."""

    def set_mempolicy(self, mode: int, nodes: tuple[int, ...]) -> None:
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))


@linux_only
def test_kernel_refusal_warns_once_and_continues(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """EPERM from the kernel is not an error: one warning; the result says memory is unbound, and why."""
    real = bind_module.syscalls()
    assert real is not None
    monkeypatch.setattr(bind_module, "syscalls", lambda: _RefusingSyscalls(*real))
    monkeypatch.setattr(bind_module, "_warned", set())
    caplog.set_level(logging.DEBUG, logger="numa_bind")
    first = bind_current_process(nodes=[0])
    second = bind_current_process(nodes=[0])
    assert (first.cpus_applied, first.memory_applied) == (False, False)
    assert first.reason is not None and "refused memory policy bind on nodes [0]" in first.reason
    assert second.reason == first.reason
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert current_mempolicy() == MemPolicy(mode="default", nodes=())


def test_package_exports_are_documented() -> None:
    """Every public name has a docstring."""
    for name in numa_bind.__all__:
        obj = getattr(numa_bind, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__, name
