"""Binding the calling process: CPU affinity on every thread, and the NUMA memory policy.

Memory policy is per thread in Linux and only the calling thread's can be set: bind at
process birth, before threads and large allocations exist. New threads inherit both the
affinity and the policy; so do children (across ``fork`` and ``exec``), which is what
``bound_for_child`` relies on. Pages touched before binding stay where they are.
"""

from __future__ import annotations

import contextlib
import logging
import numbers
import os
import platform
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from numa_bind._allowed import bindable_cpus, bindable_nodes
from numa_bind._cpulist import format_cpulist
from numa_bind._syscalls import MODE_FLAGS, MODE_NAMES, MODES, MPOL_F_ADDR, MPOL_F_NODE, syscalls
from numa_bind.exceptions import BindingError

__all__ = [
    "BindResult",
    "MemPolicy",
    "Policy",
    "bind_current_process",
    "binding_supported",
    "bound_for_child",
    "current_mempolicy",
    "node_of_address",
    "reset_mempolicy",
]

_LOG = logging.getLogger(__name__)
_warned: set[str] = set()

Policy = Literal["bind", "preferred", "interleave"]
"""Memory policies offered: allocate only on ``nodes``; prefer the node; spread pages over them."""


@dataclass(frozen=True, kw_only=True)
class BindResult:
    """What a binding call achieved.

    Attributes:
        cpus_applied: The CPU affinity was set (False when not requested or refused).
        memory_applied: The memory policy was set (False when not requested or refused).
        reason: Why something requested was not applied; None when all of it took effect.
    """

    cpus_applied: bool
    memory_applied: bool
    reason: str | None


@dataclass(frozen=True, kw_only=True)
class MemPolicy:
    """The calling thread's memory policy.

    Attributes:
        mode: ``"default"``, ``"bind"``, ``"preferred"``, ``"interleave"``, ``"local"``,
            ``"preferred_many"``, ``"weighted_interleave"``; ``"unsupported"`` off Linux or on an
            unlisted architecture; ``"unknown"`` when the kernel refused the query.
        nodes: The policy's nodes, ascending (empty for ``"default"``).
    """

    mode: str
    nodes: tuple[int, ...]


def binding_supported() -> bool:
    """Whether this system can attempt both CPU affinity and memory-policy binding (Linux x86-64/aarch64)."""
    return hasattr(os, "sched_setaffinity") and syscalls() is not None


def _warn_once(kind: str, message: str) -> None:
    if kind in _warned:
        _LOG.debug("%s", message)
        return
    _warned.add(kind)
    _LOG.warning("%s (further refusals are logged at debug level)", message)


def _refusal(setting: str, bad: tuple[int, ...], allowed: tuple[int, ...], fix: str) -> BindingError:
    """The error for ``bad`` ids of ``setting``: names them, the allowed ones (cpulist format) and ``fix``."""
    shown = ",".join(map(str, bad)) if any(value < 0 for value in bad) else format_cpulist(bad)
    message = (
        f"{setting}={shown or '<empty>'} cannot be bound: "
        f"allowed {setting} are {format_cpulist(allowed) or '<none>'}; {fix}"
    )
    return BindingError(setting, bad, allowed, message)


def _ids(setting: str, values: Iterable[int]) -> tuple[int, ...]:
    """``values`` as sorted unique ids; a string, a lone number or a non-integer is refused with the fix.

    Raises:
        TypeError: ``values`` is not an iterable of integers.
    """
    fix = f"pass {setting} as integer ids, e.g. {setting}=[0, 1] or {setting}=parse_cpulist('0-1')"
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TypeError(f"{setting}={values!r} is a {type(values).__name__}; {fix}")
    ids = list(values)
    odd = [value for value in ids if isinstance(value, bool) or not isinstance(value, numbers.Integral)]
    if odd:
        raise TypeError(f"{setting} holds {odd[0]!r}, a {type(odd[0]).__name__}; {fix}")
    return tuple(sorted({int(value) for value in ids}))


def _checked(setting: str, values: Iterable[int], allowed: tuple[int, ...]) -> tuple[int, ...]:
    chosen = _ids(setting, values)
    if not chosen:
        raise _refusal(setting, (), allowed, f"pass at least one of the allowed {setting}, or None to skip")
    bad = tuple(value for value in chosen if value not in set(allowed))
    if bad:
        raise _refusal(setting, bad, allowed, f"choose {setting} from the allowed set (`numa-bind show`)")
    return chosen


def _thread_ids() -> list[int]:
    try:
        return [int(entry.name) for entry in Path("/proc/self/task").iterdir()]
    except OSError:
        return [0]


def _apply_cpus(cpus: tuple[int, ...], all_threads: bool) -> str | None:
    for tid in _thread_ids() if all_threads else [0]:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:
            continue  # the thread exited meanwhile
        except OSError as exc:
            reason = f"the kernel refused CPU affinity {list(cpus)}: {exc}; running unpinned"
            _warn_once("cpus", reason)
            return reason
    return None


def _apply_memory(mode: int, nodes: tuple[int, ...]) -> str | None:
    calls = syscalls()
    if calls is None:
        reason = f"memory policy is unsupported on {sys.platform}/{platform.machine()}"
        _warn_once("unsupported", reason)
        return reason
    try:
        calls.set_mempolicy(mode, nodes)
    except OSError as exc:
        name = MODE_NAMES.get(mode & ~MODE_FLAGS, str(mode))
        reason = (
            f"the kernel refused memory policy {name} on nodes {list(nodes)}: "
            f"{exc} (containers need CAP_SYS_NICE / a seccomp profile that allows set_mempolicy); "
            "memory stays unbound"
        )
        _warn_once("memory", reason)
        return reason
    return None


def _bind(
    cpus: Iterable[int] | None, nodes: Iterable[int] | None, policy: Policy, *, all_threads: bool
) -> BindResult:
    if policy not in ("bind", "preferred", "interleave"):
        raise ValueError(f"policy={policy!r} is not a memory policy; use 'bind', 'preferred' or 'interleave'")
    if cpus is None and nodes is None:
        return BindResult(cpus_applied=False, memory_applied=False, reason="nothing requested")
    if not hasattr(os, "sched_setaffinity"):
        reason = f"binding is unsupported on {sys.platform}"
        _warn_once("unsupported", reason)
        return BindResult(cpus_applied=False, memory_applied=False, reason=reason)
    node_set = None if nodes is None else _ids("nodes", nodes)
    if policy == "preferred" and node_set is not None and len(node_set) > 1:
        raise _refusal(
            "nodes",
            node_set,
            bindable_nodes(),
            "policy='preferred' takes one node; pass one or use 'interleave'",
        )
    chosen_cpus = None if cpus is None else _checked("cpus", cpus, bindable_cpus())
    chosen_nodes = None if node_set is None else _checked("nodes", node_set, bindable_nodes())
    cpu_reason = None if chosen_cpus is None else _apply_cpus(chosen_cpus, all_threads)
    mem_reason = None if chosen_nodes is None else _apply_memory(MODES[policy], chosen_nodes)
    reasons = [reason for reason in (cpu_reason, mem_reason) if reason is not None]
    return BindResult(
        cpus_applied=chosen_cpus is not None and cpu_reason is None,
        memory_applied=chosen_nodes is not None and mem_reason is None,
        reason="; ".join(reasons) or None,
    )


def bind_current_process(
    *, cpus: Iterable[int] | None = None, nodes: Iterable[int] | None = None, policy: Policy = "bind"
) -> BindResult:
    """Bind the calling process to CPUs and its memory to NUMA nodes.

    CPU affinity is set on every thread of the process (walking ``/proc/self/task``). The memory
    policy can only be set for the calling thread (a Linux rule), so call this at process birth,
    before other threads and large allocations. A kernel refusal (EPERM in containers, seccomp)
    is logged once as a warning and the process continues unbound; the result says so.

    Args:
        cpus: CPU ids to run on; None leaves the affinity alone.
        nodes: NUMA node ids for memory; None leaves the memory policy alone.
        policy: ``"bind"`` (only these nodes), ``"preferred"`` (one node, falling back when full)
            or ``"interleave"`` (pages spread round-robin over the nodes).

    Returns:
        What took effect.

    Raises:
        BindingError: A CPU or node does not exist or is not allowed (the error lists the
            allowed set), the set is empty, or ``"preferred"`` got more than one node.
        ValueError: ``policy`` is not one of the three.
        TypeError: ``cpus`` or ``nodes`` is not an iterable of integers (a string, a lone number).
    """
    return _bind(cpus, nodes, policy, all_threads=True)


def current_mempolicy() -> MemPolicy:
    """The calling thread's memory policy (``get_mempolicy``)."""
    calls = syscalls()
    if calls is None:
        return MemPolicy(mode="unsupported", nodes=())
    try:
        mode, nodes = calls.get_mempolicy()
    except OSError as exc:
        _LOG.debug("get_mempolicy refused: %s", exc)
        return MemPolicy(mode="unknown", nodes=())
    return MemPolicy(mode=MODE_NAMES.get(mode & ~MODE_FLAGS, str(mode)), nodes=nodes)


def node_of_address(addr: int) -> int:
    """The NUMA node holding the page at ``addr`` (``get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR)``).

    The page is faulted in (under the current policy) if it was not touched yet.

    Raises:
        OSError: The kernel refused the query, ``addr`` is not mapped (EFAULT), or the system is
            unsupported (ENOSYS).
    """
    calls = syscalls()
    if calls is None:
        raise OSError(38, "get_mempolicy is unsupported on this system")
    return calls.get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR, addr)[0]


def reset_mempolicy() -> bool:
    """Return the calling thread to the default (local) memory policy; False if refused or unsupported."""
    calls = syscalls()
    if calls is None:
        return False
    try:
        calls.set_mempolicy(MODES["default"], ())
    except OSError as exc:
        _LOG.debug("set_mempolicy(MPOL_DEFAULT) refused: %s", exc)
        return False
    return True


@contextlib.contextmanager
def bound_for_child(
    *, cpus: Iterable[int] | None = None, nodes: Iterable[int] | None = None, policy: Policy = "bind"
) -> Iterator[BindResult]:
    """Bind the calling thread for the duration of the block, then restore it.

    A child started inside the block (``Process.start()``, spawn or fork) inherits the binding
    from its first instruction, so even its interpreter start-up allocations land on the right
    node. Only the calling thread is touched; its previous affinity and memory policy are put
    back on exit, also when the block raises.

    Args:
        cpus: CPU ids for the child; None leaves the affinity alone.
        nodes: NUMA nodes for the child's memory; None leaves the memory policy alone.
        policy: As in ``bind_current_process``.

    Yields:
        What took effect.

    Raises:
        BindingError: As in ``bind_current_process``.
    """
    saved_cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    calls = syscalls()
    saved_policy: tuple[int, tuple[int, ...]] | None = None
    if calls is not None:
        with contextlib.suppress(OSError):
            saved_policy = calls.get_mempolicy()
    result = _bind(cpus, nodes, policy, all_threads=False)
    try:
        yield result
    finally:
        _restore(result, saved_cpus, saved_policy)


def _restore(
    result: BindResult, saved_cpus: set[int] | None, saved_policy: tuple[int, tuple[int, ...]] | None
) -> None:
    """Put back what ``bound_for_child`` changed; a refusal here is logged, not raised."""
    calls = syscalls()
    try:
        if result.cpus_applied and saved_cpus is not None:
            os.sched_setaffinity(0, saved_cpus)
        if result.memory_applied and calls is not None and saved_policy is not None:
            mode, saved_nodes = saved_policy
            without_nodes = mode & ~MODE_FLAGS in (MODES["default"], MODES["local"])
            calls.set_mempolicy(mode, () if without_nodes else saved_nodes)
    except OSError as exc:
        _LOG.warning("could not restore the parent's binding after starting a child: %s", exc)
