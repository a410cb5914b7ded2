"""Child-process entry points that bind and then observe the result (importable under spawn).

The tests start these in spawned children so that binding never touches the test process; they
also serve anyone who wants to check, on a new host, that binding takes effect.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
from typing import Any

from numa_bind._bind import Policy, bind_current_process, current_mempolicy, node_of_address

__all__ = ["bind_and_report", "report_inherited"]


def _fresh_page_node() -> int | None:
    """Map and write one fresh anonymous page; the node it landed on (None if the query is refused)."""
    page = mmap.mmap(-1, mmap.PAGESIZE)
    try:
        page[:1] = b"\x01"  # first touch: the page is allocated now, under the current policy
        anchor = ctypes.c_char.from_buffer(page)
        address = ctypes.addressof(anchor)
        del anchor  # release the buffer export so the map can close
        try:
            return node_of_address(address)
        except OSError:
            return None
    finally:
        page.close()


def _observe() -> dict[str, Any]:
    policy = current_mempolicy()
    return {
        "cpus": tuple(sorted(os.sched_getaffinity(0))),
        "mode": policy.mode,
        "nodes": policy.nodes,
        "page_node": _fresh_page_node(),
    }


def report_inherited(queue: Any) -> None:
    """Put what this process inherited (affinity, memory policy, node of a fresh page) on ``queue``."""
    queue.put(_observe())


def bind_and_report(
    queue: Any, cpus: tuple[int, ...] | None, nodes: tuple[int, ...] | None, policy: Policy
) -> None:
    """Bind this process (with a second thread already running), then report on ``queue``.

    The report holds the ``BindResult`` fields, the observations of ``report_inherited`` and the
    affinity of the other thread (``thread_cpus``), which shows the binding reached every thread.
    """
    started = threading.Event()
    release = threading.Event()
    native: list[int] = []

    def idle() -> None:
        native.append(threading.get_native_id())
        started.set()
        release.wait(10.0)

    helper = threading.Thread(target=idle, daemon=True)
    helper.start()
    started.wait(10.0)
    try:
        result = bind_current_process(cpus=cpus, nodes=nodes, policy=policy)
        report = _observe()
        report["thread_cpus"] = tuple(sorted(os.sched_getaffinity(native[0])))
        report["cpus_applied"] = result.cpus_applied
        report["memory_applied"] = result.memory_applied
        report["reason"] = result.reason
    finally:
        release.set()
        helper.join(10.0)
    queue.put(report)
