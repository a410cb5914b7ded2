"""Fill the on-disk compile cache with an agent's compiled steps from a process of their own.

# Note [compile warmer]

A background compile (Note [Compile in the background]) builds the compiled steps in a thread of the
training process. There its Python half (dynamo, AOT autograd, inductor's lowering) takes turns with
the training thread on one GIL, and it starts only once the interim steps are captured, so on the
GPU host it switched well after a compile first would have (wiki/benchmarks.md, "Compile in the
background"). A warm compile cache cuts the same build to a few seconds: dynamo traces again, AOT
autograd's and inductor's entries and the compiled kernels load.

So with ``compile_warmer`` the agent starts at its construction, before the build's own set-up (its
deep copy, inductor's import), a *warmer*: a separate Python process (``python -m
fastsac_core._warmer_process``) that builds a scratch agent of the same dims, settings, execution
policy, device and envs, and runs ``BackgroundCompile``'s build on it: the very functions, shapes and
synthetic batches the agent's own build compiles, so every graph it compiles lands in the shared
cache (Note [compile cache]) under the key the agent's build looks up.
The compile thread, once started, first waits for the warmer (``CompileWarmer.wait``, bounded by
``WARMER_WAIT_S``) and then builds from the warm cache. Nothing of the warmer's model reaches the
agent: the cache holds compiled code only.

* Its job travels pickled on its stdin; its stdout and stderr are the starting process's (its
  warnings land in the same log), and its result (one JSON line: when it ended, graphs compiled and
  found, or the error) comes back on a pipe of its own, whose descriptor the job names.
* It runs on the CPUs it is given (a learner gives its own and its collectors': Note [compile on
  borrowed CPUs] in ``fastsac_async``), set by the starting process as soon as it exists, with that
  many inductor compile workers, and on the agent's device (a cache entry is specific to the GPU).
* It dies with the thread that started it (``PR_SET_PDEATHSIG``; it exits at once if its parent is
  already gone): an agent built in a thread that ends early loses its warmer, which costs only time.
  ``close`` kills and reaps it (bounded), and so does the collection of its ``CompileWarmer``: no
  warmer outlives its agent.
* It starts only where it can help (``warmer_refusal`` says why not otherwise): a background compile,
  the ``inductor`` backend (the one whose graphs the cache keeps), and caches on, neither
  ``FASTSAC_COMPILE_CACHE=off`` nor torch's own switches (``force_disable_caches``, ``fx_graph_cache``).
* A warmer that fails, exits without a result or outlasts ``WARMER_WAIT_S`` costs only time: the
  thread logs one warning and compiles whatever the cache lacks itself, as without a warmer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from ._compile_cache import compile_cache, use_compile_cache
from ._execution import ExecutionPolicy
from .config import FastSACConfig
from .env import EnvDims

__all__ = ["WARMER_WAIT_S", "CompileWarmer", "WarmerJob", "WarmerOutcome", "warmer_refusal"]

log = logging.getLogger(__name__)

WARMER_WAIT_S = 300.0
"""Longest wait of a compile thread for its warmer (several times a cold compile on a learner's own
CPUs: wiki/benchmarks.md, "Cold start"); then the warmer is killed and the thread compiles itself."""

_KILL_WAIT_S = 10.0
"""Longest wait for a killed warmer to be reaped."""

_WARMER_MODULE = "fastsac_core._warmer_process"
"""The warmer's entry point (``python -m``)."""


@dataclass(frozen=True, kw_only=True)
class WarmerJob:
    """What a warmer compiles: the agent's own build, on a scratch agent of the same shapes."""

    dims: EnvDims
    cfg: FastSACConfig
    execution: ExecutionPolicy
    device: str
    """The agent's device, with its index on CUDA (``cuda:0``, ``cpu``)."""
    num_envs: int
    """Envs of the agent's replay buffer (with ``cfg.batch_size``, the sampled rows per env)."""
    world_size: int
    """Ranks (the per-env batch of one rank depends on it)."""
    updates: int
    """Updates per call the build compiles the batch preparation for (``BackgroundCompile``)."""
    cpus: tuple[int, ...] | None = None
    """CPUs the warmer and its compile workers run on (None: the starting process's)."""
    parent_pid: int = 0
    """The starting process (the warmer exits at once if it has already gone)."""
    result_fd: int = -1
    """The warmer's descriptor of the pipe its result goes to."""


@dataclass(frozen=True)
class WarmerOutcome:
    """How a warmer ended."""

    ok: bool
    """It built every step (its graphs are in the cache)."""
    seconds: float
    """From its launch to its end (its own clock when it said; else when its end was seen)."""
    detail: str
    """One line: what it compiled, or why it failed."""


def warmer_refusal(cfg: FastSACConfig, execution: ExecutionPolicy) -> str | None:
    """Why an agent of ``cfg`` and ``execution`` starts no warmer (None: it starts one)."""
    if not execution.background:
        return "the steps compile before the first update, in this process"
    if not cfg.compile_warmer:
        return "algo.agent.compile_warmer=false"
    if execution.backend != "inductor":
        return f"the compile backend is {execution.backend!r}: only inductor's graphs are cached"
    if compile_cache().folder is None:
        return "the compile cache is off"
    import torch._inductor.config as inductor_config
    import torch.compiler.config

    if torch.compiler.config.force_disable_caches or not inductor_config.fx_graph_cache:
        return "torch's compile caches are off (force_disable_caches, or fx_graph_cache)"
    return None


class CompileWarmer:
    """A warmer process (Note [compile warmer]); ``start`` launches one, ``wait`` and ``close`` end it.

    Args:
        process: The running warmer.
        results: The read end of its result pipe.
    """

    def __init__(self, process: subprocess.Popen[bytes], results: int) -> None:
        self._process = process
        self._pipe = [results]
        """The read end of its result pipe, until ``close`` (a list: the finalizer shares it)."""
        os.set_blocking(results, False)  # read only what the warmer wrote: never wait on the pipe
        self._launched = time.time()
        self._outcome: WarmerOutcome | None = None
        self._lock = threading.Lock()
        # A warmer whose owner is collected (or whose process exits) without close() dies too.
        weakref.finalize(self, _kill_and_reap, process, self._pipe)

    @classmethod
    def start(cls, job: WarmerJob) -> CompileWarmer:
        """Launch a warmer for ``job``; it dies with the calling thread (Note [compile warmer]).

        The compile cache is applied here first, so the warmer inherits the choice.
        """
        use_compile_cache()
        environ = dict(os.environ)
        if job.cpus:
            environ["TORCHINDUCTOR_COMPILE_THREADS"] = str(min(32, len(job.cpus)))
        read_end, write_end = os.pipe()
        try:
            job = dataclasses.replace(job, parent_pid=os.getpid(), result_fd=write_end)
            process = subprocess.Popen(
                [sys.executable, "-m", _WARMER_MODULE], stdin=subprocess.PIPE, env=environ,
                pass_fds=(write_end,),
            )  # fmt: skip
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)  # the warmer holds its own copy: EOF once it exits
        warmer = cls(process, read_end)  # from here on its finalizer kills, reaps and closes
        if job.cpus and hasattr(os, "sched_setaffinity"):  # at once: its imports already run there
            with contextlib.suppress(OSError):  # it sets them again itself, and says why if it cannot
                os.sched_setaffinity(process.pid, job.cpus)
        assert process.stdin is not None
        with contextlib.suppress(OSError):  # a warmer that died at once: wait() reports how
            try:
                process.stdin.write(pickle.dumps(job))
            finally:
                process.stdin.close()
        log.info("compile warmer started (pid %d) on CPUs %s", process.pid, _cpus_text(job.cpus))
        return warmer

    @property
    def pid(self) -> int:
        """The warmer's process id."""
        return self._process.pid

    def wait(self, timeout_s: float, *, stop: threading.Event | None = None) -> WarmerOutcome | None:
        """Wait up to ``timeout_s`` (or until ``stop`` is set) for the warmer; its outcome once ended."""
        stop = stop or threading.Event()
        deadline = time.monotonic() + timeout_s
        while self._process.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0 or stop.is_set():
                return None
            stop.wait(min(0.2, left))
        return self.outcome()

    def outcome(self) -> WarmerOutcome | None:
        """How the warmer ended (None while it runs)."""
        with self._lock:
            if self._outcome is None and self._process.poll() is not None:
                self._outcome = self._read_outcome()
            return self._outcome

    def close(self, wait_s: float = _KILL_WAIT_S) -> None:
        """Kill the warmer if it still runs and reap it (for at most ``wait_s``); idempotent."""
        if self._process.poll() is None:
            self._process.kill()
            try:
                self._process.wait(wait_s)
            except subprocess.TimeoutExpired:
                log.warning("compile warmer (pid %d) not reaped %.0f s after SIGKILL", self.pid, wait_s)
        self.outcome()
        with self._lock:
            _close_pipe(self._pipe)

    def _read_outcome(self) -> WarmerOutcome:
        seen = time.time()
        code = self._process.returncode
        text = self._drain_results().decode(errors="replace").strip()
        try:
            result: dict[str, Any] = json.loads(text.splitlines()[-1]) if text else {}
        except json.JSONDecodeError:
            result = {}
        seconds = float(result.get("ended_at", seen)) - self._launched
        if code == 0 and result.get("ok"):
            detail = (
                f"{result.get('graphs_compiled', '?')} graph(s) compiled, "
                f"{result.get('graphs_found', '?')} found in the cache, in {result.get('build_s', 0):.1f} s"
            )
            return WarmerOutcome(True, seconds, detail)
        if code is not None and code < 0:
            try:
                why = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                why = f"killed by signal {-code}"
        else:
            missing = f"exit code {code} without a result (its errors are in this log)"
            why = str(result.get("error") or missing)
        return WarmerOutcome(False, seconds, why)

    def _drain_results(self) -> bytes:
        """What the warmer wrote to its result pipe (a compile worker it forked may still hold it open)."""
        chunks: list[bytes] = []
        while self._pipe:
            try:
                chunk = os.read(self._pipe[0], 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def _kill_and_reap(process: subprocess.Popen[bytes], pipe: list[int]) -> None:
    if process.poll() is None:
        process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(_KILL_WAIT_S)
    _close_pipe(pipe)


def _close_pipe(pipe: list[int]) -> None:
    while pipe:
        os.close(pipe.pop())


def _cpus_text(cpus: Collection[int] | None) -> str:
    return "of this process" if not cpus else ",".join(map(str, sorted(cpus)))
