"""The compile warmer's process (Note [compile warmer] in ``_compile_warmer``): its body and its entry point.

``python -m fastsac_core._warmer_process`` reads a pickled ``WarmerJob`` on stdin, compiles it
(``build``, also callable in-process) and writes one JSON line to the job's result descriptor.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import signal
import sys
import time
from typing import Any

import torch

from ._agent import FastSACAgent
from ._background_compile import BackgroundCompile
from ._compile_warmer import WarmerJob
from ._replay import ReplayBuffer

__all__ = ["build", "main"]

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1

_ERROR_MAX = 1000
"""Longest error text in the result line: the line must fit the pipe's buffer (4 KiB at the least),
as the starting process reads it only once this process has exited."""


def build(job: WarmerJob) -> dict[str, Any]:
    """Compile ``job``'s steps in this process, as the agent's background build would; the result."""
    from torch._dynamo.utils import counters

    device = torch.device(job.device)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    # The buffer's capacity appears in no compiled graph: a scratch agent keeps the smallest one.
    small = dataclasses.replace(job.cfg, buffer_size=job.cfg.num_steps + 1)
    buffer = ReplayBuffer.of(job.dims, small, job.num_envs, device=device)
    scratch = dataclasses.replace(job.execution, background=False)  # no thread (nor warmer) of its own
    agent = FastSACAgent(
        job.dims, job.cfg, device, buffer=buffer, world_size=job.world_size, execution=scratch
    )
    graphs_before = counters["stats"].get("unique_graphs", 0)
    started = time.perf_counter()
    BackgroundCompile(agent, job.updates).build_here()
    inductor = counters["inductor"]
    return {
        "ok": True,
        "build_s": time.perf_counter() - started,
        "graphs_traced": counters["stats"].get("unique_graphs", 0) - graphs_before,
        "graphs_compiled": inductor.get("fxgraph_cache_miss", 0),
        "graphs_found": inductor.get("fxgraph_cache_hit", 0),
    }


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the thread that started it ends; exit now if it already has."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the starting process's close() still kills it
        pass
    if parent_pid and os.getppid() != parent_pid:
        os._exit(3)


def main() -> None:
    """The warmer process: the job from stdin, the build, one JSON line to the result descriptor."""
    job: WarmerJob = pickle.load(sys.stdin.buffer)
    _die_with_parent(job.parent_pid)
    if job.cpus and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, job.cpus)
        except OSError as error:
            log.warning("compile warmer: cannot run on CPUs %s (%s)", sorted(job.cpus), error)
    code = 0
    try:
        result = build(job)
    except Exception as exc:  # the traceback goes to the log, one line to the starting process
        import traceback

        traceback.print_exc()
        line = f"{type(exc).__name__}: {exc}"  # whole in the log above; one short line for the caller
        short = line if len(line) <= _ERROR_MAX else line[: _ERROR_MAX - 3] + "..."
        result, code = {"ok": False, "error": short}, 1
    result["ended_at"] = time.time()
    with os.fdopen(job.result_fd, "wb") as out:
        out.write((json.dumps(result) + "\n").encode())
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        from torch._inductor.async_compile import shutdown_compile_workers

        shutdown_compile_workers()
    finally:
        os._exit(code)  # no interpreter teardown: nothing of the build is needed any more


if __name__ == "__main__":
    main()
