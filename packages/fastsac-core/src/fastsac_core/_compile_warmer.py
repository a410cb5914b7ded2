"""Fill the on-disk compile cache with an agent's compiled steps from a process of their own.

# Note [compile warmer]

A background compile (Note [Compile in the background]) builds the compiled steps in a thread of the
training process, and on the GPU host that build took about 60 s beside a training learner against
about 37 s for a compile first (wiki/benchmarks.md, "Compile in the background"): dynamo, AOT autograd
and inductor's lowering are Python and share the GIL with the training thread, and the thread starts
only once the interim steps are captured. A warm compile cache cuts the same build to a few seconds
(dynamo traces again, AOT autograd's and inductor's entries and the compiled kernels load).

So with ``compile_warmer`` the agent starts, at its construction, a *warmer*: a separate Python
process (``python -m fastsac_core._compile_warmer``) that builds a scratch agent of the same dims,
settings, execution policy, device and envs, and runs ``BackgroundCompile``'s build on it: the very
functions, shapes and synthetic batches the agent's own build compiles, so every graph it compiles
lands in the shared cache (Note [compile cache]) under the key the agent's build looks up. The compile
thread, once started, first waits for the warmer (``CompileWarmer.wait``, bounded by
``WARMER_WAIT_S``) and then builds from the warm cache. Nothing of the warmer's model reaches the
agent: the cache holds compiled code only.

* Its job travels pickled on its stdin; its stdout is moved onto its stderr at once (which it shares
  with the agent's process: its warnings land in the same log), and the one line of its result (JSON:
  seconds, graphs compiled and found, or the error) goes to the saved stdout pipe at the end.
* It runs on the CPUs it is given (a learner gives its own and its collectors': Note [compile on
  borrowed CPUs] in ``fastsac_async``) with that many inductor compile workers, and on the agent's
  device (a cache entry is specific to the GPU model).
* It dies with the thread that started it (``PR_SET_PDEATHSIG``; it exits at once if that process
  is already gone), and ``close`` kills it (bounded), so no warmer outlives its agent.
* It is started only where it can help: a background compile, caches on (``FASTSAC_COMPILE_CACHE``
  not ``off``) and a backend named by a string (a callable cannot travel to another process).
  ``warmer_refusal`` says why not otherwise.
* A warmer that fails, exits without a result or outlasts ``WARMER_WAIT_S`` costs nothing but time:
  the thread logs one warning and compiles from whatever the cache holds, as without a warmer.
"""

from __future__ import annotations

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
from typing import IO, Any

import torch

from ._compile_cache import compile_cache, use_compile_cache
from ._execution import ExecutionPolicy
from .config import FastSACConfig
from .env import EnvDims

__all__ = ["WARMER_WAIT_S", "CompileWarmer", "WarmerJob", "WarmerOutcome", "warmer_refusal"]

log = logging.getLogger(__name__)

WARMER_WAIT_S = 900.0
"""Longest wait of a compile thread for its warmer (a cold Humanoid compile on 2 CPUs took 61 s on
h200x2); after it the warmer is killed and the thread compiles itself."""

_KILL_WAIT_S = 10.0
"""Longest wait for a killed warmer to be reaped."""

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, kw_only=True)
class WarmerJob:
    """What a warmer compiles: the agent's own build, on a scratch agent of the same shapes."""

    dims: EnvDims
    cfg: FastSACConfig
    execution: ExecutionPolicy
    device: str
    """The agent's device (``cuda:0``, ``cpu``)."""
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


@dataclass(frozen=True)
class WarmerOutcome:
    """How a warmer ended."""

    ok: bool
    """It built every step (its graphs are in the cache)."""
    seconds: float
    """From its start to its end (as the starting process saw it)."""
    detail: str
    """One line: what it compiled, or why it failed."""


def warmer_refusal(cfg: FastSACConfig, execution: ExecutionPolicy) -> str | None:
    """Why an agent of ``cfg`` and ``execution`` starts no warmer (None: it starts one)."""
    if not execution.background:
        return "the steps compile before the first update, in this process"
    if not cfg.compile_warmer:
        return "algo.agent.compile_warmer=false"
    if compile_cache().folder is None:
        return "the compile cache is off"
    if not isinstance(execution.backend, str):
        return f"the compile backend {execution.backend!r} is not a name another process can use"
    return None


class CompileWarmer:
    """A warmer process (Note [compile warmer]); ``start`` launches one, ``wait`` and ``close`` end it.

    Args:
        process: The running warmer.
    """

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process
        # A warmer whose owner is collected (or a process that exits) without close() dies too.
        weakref.finalize(self, _kill, process)
        self._started = time.perf_counter()
        self._ended: float | None = None
        self._outcome: WarmerOutcome | None = None
        self._lock = threading.Lock()

    @classmethod
    def start(cls, job: WarmerJob) -> CompileWarmer:
        """Launch a warmer for ``job`` (the compile cache applied first, so it inherits the choice)."""
        use_compile_cache()
        job = dataclasses.replace(job, parent_pid=os.getpid())
        environ = dict(os.environ)
        if job.cpus:
            environ["TORCHINDUCTOR_COMPILE_THREADS"] = str(min(32, len(job.cpus)))
        process = subprocess.Popen(
            [sys.executable, "-m", "fastsac_core._compile_warmer"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=environ,
            close_fds=True,
        )
        assert process.stdin is not None
        try:
            process.stdin.write(pickle.dumps(job))
            process.stdin.close()
        except OSError:  # it died at once: wait() reports how
            pass
        log.info("compile warmer started (pid %d) on CPUs %s", process.pid, _cpus_text(job.cpus))
        return cls(process)

    @property
    def pid(self) -> int:
        """The warmer's process id."""
        return self._process.pid

    def wait(self, timeout_s: float, *, stop: threading.Event | None = None) -> WarmerOutcome | None:
        """Wait up to ``timeout_s`` (or until ``stop`` is set) for the warmer; its outcome once ended."""
        deadline = time.monotonic() + timeout_s
        while self._process.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0 or (stop is not None and stop.is_set()):
                return None
            if stop is not None:
                stop.wait(min(0.2, left))
            else:
                time.sleep(min(0.2, left))
        return self.outcome()

    def outcome(self) -> WarmerOutcome | None:
        """How the warmer ended (None while it runs)."""
        with self._lock:
            if self._outcome is None and self._process.poll() is not None:
                self._outcome = self._read_outcome()
            return self._outcome

    def close(self) -> None:
        """Kill the warmer if it still runs and reap it (bounded); idempotent."""
        if self._process.poll() is None:
            self._process.kill()
            try:
                self._process.wait(_KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                log.warning("compile warmer (pid %d) did not exit after SIGKILL", self._process.pid)
        self.outcome()
        if self._process.stdout is not None:
            self._process.stdout.close()

    def _read_outcome(self) -> WarmerOutcome:
        seconds = time.perf_counter() - self._started
        code = self._process.returncode
        line = ""
        if self._process.stdout is not None and not self._process.stdout.closed:
            line = self._process.stdout.read().decode(errors="replace").strip()
        try:
            result: dict[str, Any] = json.loads(line.splitlines()[-1]) if line else {}
        except json.JSONDecodeError:
            result = {}
        if code == 0 and result.get("ok"):
            detail = (
                f"{result.get('graphs_compiled', '?')} graph(s) compiled, "
                f"{result.get('graphs_found', '?')} found in the cache, in {result.get('build_s', 0):.1f} s"
            )
            return WarmerOutcome(True, seconds, detail)
        if code is not None and code < 0:
            why = f"killed by {signal.Signals(-code).name}"
        else:
            missing = f"exit code {code} without a result (its errors are in this log)"
            why = str(result.get("error") or missing)
        return WarmerOutcome(False, seconds, why)


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()


def _cpus_text(cpus: Collection[int] | None) -> str:
    return "of this process" if not cpus else ",".join(map(str, sorted(cpus)))


# ---------------------------------------------------------------------- the warmer process


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the thread that started it ends; exit now if it already has."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: close() still kills it
        pass
    if parent_pid and os.getppid() != parent_pid:
        os._exit(3)


def build(job: WarmerJob) -> dict[str, Any]:
    """Compile ``job``'s steps in this process (the warmer's body; in-process for tests); its result."""
    from torch._dynamo.utils import counters

    from ._agent import FastSACAgent
    from ._background_compile import BackgroundCompile
    from ._replay import ReplayBuffer

    device = torch.device(job.device)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    # The buffer's capacity appears in no compiled graph: a scratch agent keeps the smallest one.
    small = dataclasses.replace(job.cfg, buffer_size=job.cfg.num_steps + 1)
    buffer = ReplayBuffer.of(job.dims, small, job.num_envs, device=device)
    scratch = dataclasses.replace(job.execution, background=False)  # no thread of its own
    agent = FastSACAgent(
        job.dims, job.cfg, device, buffer=buffer, world_size=job.world_size, execution=scratch
    )
    started = time.perf_counter()
    BackgroundCompile(agent, job.updates).build_here()
    inductor = counters["inductor"]
    return {
        "ok": True,
        "build_s": time.perf_counter() - started,
        "graphs_compiled": inductor.get("fxgraph_cache_miss", 0),
        "graphs_found": inductor.get("fxgraph_cache_hit", 0),
    }


def main() -> None:
    """The warmer process: read the job on stdin, build, write one JSON line on the saved stdout."""
    result_fd = os.dup(1)
    os.dup2(2, 1)  # anything printed goes to the shared log, not into the result pipe
    job: WarmerJob = pickle.load(sys.stdin.buffer)
    _die_with_parent(job.parent_pid)
    if job.cpus and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, job.cpus)
        except OSError as error:
            log.warning("compile warmer: cannot run on CPUs %s (%s)", sorted(job.cpus), error)
    result: dict[str, Any]
    code = 0
    try:
        result = build(job)
    except Exception as exc:  # the traceback goes to the log, one line to the caller
        import traceback

        traceback.print_exc()
        result, code = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, 1
    out: IO[bytes] = os.fdopen(result_fd, "wb")
    out.write((json.dumps(result) + "\n").encode())
    out.close()
    sys.stderr.flush()
    try:
        from torch._inductor.async_compile import shutdown_compile_workers

        shutdown_compile_workers()
    finally:
        os._exit(code)  # no interpreter teardown: nothing of the build is needed any more


if __name__ == "__main__":
    main()
