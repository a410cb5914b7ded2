"""Run test bodies in spawned processes or threads, bounded, collecting their results."""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

SPAWN = multiprocessing.get_context("spawn")


def run_bodies(
    bodies: Sequence[tuple[Callable[..., None], tuple[Any, ...]]], *, mode: str, timeout_s: float
) -> dict[str, Any]:
    """Run each ``body(*args, out)`` as a process or thread; return ``{tag: value}`` they put in ``out``."""
    out: Any = SPAWN.Queue() if mode == "process" else queue.Queue()
    workers: list[Any] = []
    for body, args in bodies:
        if mode == "process":
            workers.append(SPAWN.Process(target=body, args=(*args, out), daemon=True))
        else:
            workers.append(threading.Thread(target=body, args=(*args, out), daemon=True))
    for worker in workers:
        worker.start()
    results: dict[str, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(results) < len(workers):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"bodies did not finish within {timeout_s} s; got {results}")
            with contextlib.suppress(queue.Empty):
                tag, value = out.get(timeout=min(1.0, remaining))
                results[tag] = value
    finally:
        for worker in workers:
            worker.join(timeout=10.0)
            if mode == "process" and worker.is_alive():
                worker.kill()
                worker.join(timeout=5.0)
        if mode == "process":
            out.close()
            out.join_thread()
    for worker in workers:
        if mode == "process":
            assert worker.exitcode == 0, f"{worker.name} exited with {worker.exitcode}"
    return results
