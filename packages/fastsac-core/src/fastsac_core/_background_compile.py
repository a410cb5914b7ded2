"""Build an agent's compiled update steps in a background thread while it trains with the eager ones.

# Note [Compile in the background]

Compiling the update steps (dynamo, AOT autograd, inductor's kernels) takes most of a cold start:
tens of seconds before the first update. With ``ExecutionPolicy.background`` the agent instead
trains at once with the interim steps (``policy.interim()``: the same math, eager, no compile; with
``graphs="step"`` each eager step is captured whole as a ``StepGraph``) and ``BackgroundCompile``
builds the compiled ones meanwhile, in the context its owner gives (the asynchronous learner lends it
its collectors' CPUs: Note [compile on borrowed CPUs] in ``fastsac_async.learner.cpu_loan``).

A capture fails when another thread of the process synchronises the device during it, whatever the
capture mode (on the GPU host, ``thread_local`` too: ``cudaErrorStreamCaptureInvalidated``), and a
compile synchronises (inductor's benchmarks of kernel configs, the thread's own stream). So the two
never overlap: the thread starts once the interim steps are captured (``FastSACAgent``, at the end of
an update call; at once when they have no graphs), and a capture due while it runs (new shapes, a
state load), or while a thread that was asked to stop has not ended, waits for its end, the step
running uncaptured meanwhile (``StepGraph``'s ``may_capture``). Replays and the thread's work do
overlap, as any two streams' work does. So the compile starts after the first few updates (a critic
step's warm-up and capture, and the actor's, ``policy_frequency`` times as many critic updates), not
at the agent's construction: it no longer overlaps the boot and ``learning_starts``, and a run that
ends before then never compiles.

1. On the agent's thread, at the agent's construction: a deep copy of the model (networks, ``log_alpha``,
   optimizers: same shapes, dtypes, device, ``capturable`` and ``fused``), of the normalizers, and a
   synthetic batch from a private generator. Nothing draws from the global RNG, so the run's random
   stream is the same with or without the thread.
2. On the thread, once started (``start``): first, when the agent started a compile warmer (a process
   that compiles this same build on a scratch agent into the on-disk cache: Note [compile warmer]), a
   wait for it, so the build below finds its graphs in the cache; then ``UpdateSteps`` of the full
   policy on the copy, whose compiled critic and actor steps run a few times on the synthetic batch (a
   compiled function compiles at its first call, which also executes it: so on the copy, never on the
   real state), and the
   compiled batch preparation on the copied normalizers (for the same shapes, inductor's caches then
   hold its kernels). On CUDA it runs on its own stream, synchronised before the thread says it is
   done, and with inductor's per-thread CUDA graph state of its own (torch 2.11 asserts without it when
   dynamo traces a fused optimizer step outside the importing thread: ``give_thread_cudagraph_state``).
   CUDA graphs are not captured on the thread: a capture in progress fails at the other thread's
   synchronisations (above), and torch.compile's region graphs are bound to the thread that records
   them.
3. At the next update boundary after that (``FastSACAgent.update_on_batch``, on the agent's thread):
   the copy takes the real state in place (``SACModel.copy_from``: every tensor keeps its identity, so
   the compiled steps stay valid without a recompile), then becomes the agent's model, and its steps
   the agent's steps. The batch preparation is compiled again for the real normalizers (a short trace;
   the kernels come from the warm cache). With ``graphs="step"`` the steps are ``StepGraph``s that warm
   up and capture at their next calls, on the agent's thread, as at any start. The switch is logged
   (``compiled update ready after X s (N graph(s) from the compile cache, M compiled); switched at
   update K``; the part in brackets with inductor only) and ``FastSACAgent.compiled`` turns True.
4. A compile that fails leaves the interim steps in place: one warning naming the reason, and training
   goes on eagerly. ``close`` asks the thread to stop between its calls and joins it (bounded); the
   thread is a daemon, so a compile that outlasts a short run does not hold the process at exit. A
   process that ends with the interpreter's finalization must not have it still compiling, though: a
   daemon thread inside C++ then aborts the process ("terminate called ...", seen on CUDA). So only
   worker processes, which end with ``os._exit``, compile in the background: the asynchronous learner
   (which does not wait for the thread at its end), not the synchronous trainer.

Several ranks compile up front (``ExecutionPolicy.choose``): their switch would have to happen at the
same update on every rank (a lockstep decision) and their step graphs hold collectives that must be
captured together (Note [Ranks in step graphs]). So do fp16 loss scaling (its GradScaler state lives
outside the model) and ``cudagraph_scope=regions``.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import logging
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ._batch import Batch
from ._compile_warmer import WARMER_WAIT_S
from ._steps import UpdateSteps

if TYPE_CHECKING:
    from ._agent import FastSACAgent
    from ._compile_warmer import CompileWarmer

__all__ = ["BackgroundCompile"]

log = logging.getLogger(__name__)

_CALLS = 3
"""Warm-up calls of each compiled step: the first compiles, the second may compile again (dynamo
guards the optimizers' state, created by the first), the third must find everything compiled."""


def synthetic_batch(rows: int, agent: FastSACAgent, generator: torch.Generator) -> Batch:
    """A float32 batch of ``rows`` random transitions shaped like the agent's replay samples."""
    dims, device = agent.dims, agent.device

    def randn(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator).to(device)

    ones = torch.ones(rows, device=device)
    obs, next_obs = randn(rows, dims.obs_dim), randn(rows, dims.obs_dim)
    shared = dims.critic_obs_is_obs
    return Batch(
        obs=obs,
        critic_obs=obs if shared else randn(rows, dims.critic_obs_dim),
        actions=randn(rows, dims.act_dim).clamp(-1.0, 1.0),
        rewards=randn(rows),
        next_obs=next_obs,
        next_critic_obs=next_obs if shared else randn(rows, dims.critic_obs_dim),
        bootstrap=ones,
        discount=ones * agent.cfg.gamma,
        valid=ones.clone(),
    )


def give_thread_cudagraph_state() -> None:
    """Give the calling thread inductor's per-thread CUDA graph tree state, if it has none.

    Inductor keeps its CUDA graph tree managers in a ``threading.local`` set up in the thread that
    imported it (and handed on to autograd's threads only). Dynamo reads it when it traces an
    optimizer step with CUDA gradients, and torch 2.11 asserts (an ``AssertionError`` with no
    message) in any other thread; 2.15 sets it up on first use. An empty state of the thread's own,
    as that first use would make, lets the compile thread trace there: it never records CUDA graphs.
    Called on the agent's thread too, before the compile thread starts: the first call imports the
    module, and the importing thread is the one 2.11 sets up (the agent's, which captures and retraces
    after the switch). Stashed as torch does, so autograd's threads started from here inherit it.
    """
    from torch._inductor import cudagraph_trees as trees

    local = trees.local
    if hasattr(local, "tree_manager_containers") or torch._C._is_key_in_tls("tree_manager_containers"):
        return
    local.tree_manager_containers = {}
    local.tree_manager_locks = collections.defaultdict(threading.Lock)
    torch._C._stash_obj_in_tls("tree_manager_containers", local.tree_manager_containers)
    torch._C._stash_obj_in_tls("tree_manager_locks", local.tree_manager_locks)


def _graph_counts() -> tuple[int, int]:
    """Inductor's graphs found in the compile cache and compiled so far in this process."""
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    return inductor.get("fxgraph_cache_hit", 0), inductor.get("fxgraph_cache_miss", 0)


class BackgroundCompile:
    """The compiled steps of ``agent``'s policy, built on a scratch copy in a daemon thread.

    Args:
        agent: The agent (training eagerly meanwhile); read here, on its thread, and never again.
        updates: Updates per ``update`` call the preparation is compiled for (the usual chunk).
        context: Makes the context the thread builds in (None: none); the asynchronous learner lends
            the thread its collectors' CPUs with it.
        warmer: A compile warmer filling the cache with the same build; the thread waits for it first
            and ``close`` kills it (Note [compile warmer]).
    """

    def __init__(
        self,
        agent: FastSACAgent,
        updates: int,
        context: Callable[[], AbstractContextManager[object]] | None = None,
        warmer: CompileWarmer | None = None,
    ) -> None:
        self._context = context or contextlib.nullcontext
        self._warmer = warmer
        self.policy = agent.execution
        self._started_at = 0.0
        self.seconds = 0.0
        """From the thread's start to the build's end, a wait for the warmer included (set at the end)."""
        self.error: BaseException | None = None
        """Why the build failed (None: it did not, or has not yet)."""
        self.cache_note = ""
        """What the build found in the compile cache and compiled itself (set when it ends)."""
        self.steps: UpdateSteps | None = None
        """The compiled steps on ``model`` (None until built)."""
        self.model = copy.deepcopy(agent.model)
        """The scratch copy; the agent's own model once adopted."""
        self._prep = types.SimpleNamespace(
            dims=agent.dims,
            obs_normalizer=copy.deepcopy(agent.obs_normalizer),
            critic_obs_normalizer=copy.deepcopy(agent.critic_obs_normalizer),
        )
        if agent.dims.critic_obs_is_obs:
            self._prep.critic_obs_normalizer = self._prep.obs_normalizer
        self._agent_type = type(agent)
        self._precision, self._cfg, self._device = agent.precision, agent.cfg, agent.device
        generator = torch.Generator().manual_seed(0)
        size = agent.batch_per_env * agent.buffer.num_envs
        # Plain compiled steps see rows of the sampled batch (views at offsets), captured ones their
        # fresh static inputs: the warm-up calls give each what it will be given.
        self._batch = synthetic_batch(size * updates, agent, generator)
        self._noise = torch.randn(size * updates, agent.dims.act_dim, generator=generator).to(agent.device)
        self._static = synthetic_batch(size, agent, generator)
        self._static_noise = torch.randn(size, agent.dims.act_dim, generator=generator).to(agent.device)
        self._size, self._views = size, min(2, updates)
        self._inputs_written: torch.cuda.Event | None = None
        if agent.device.type == "cuda":  # the thread's stream must follow the copies made on this one
            self._inputs_written = torch.cuda.Event()  # type: ignore[no-untyped-call]
            self._inputs_written.record(torch.cuda.current_stream(agent.device))
        self._stop = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="background-compile", daemon=True)

    def start(self) -> None:
        """Start the thread (once; a closed build stays stopped); call it on the agent's thread.

        On CUDA the agent's thread gets inductor's CUDA graph state first (``give_thread_cudagraph_state``:
        the importer under torch 2.11), here rather than at construction: that import costs a learner's
        start a second or more, and nothing needs it before the compile thread starts.
        """
        if not self.started and not self._stop.is_set():
            if self._device.type == "cuda":
                give_thread_cudagraph_state()
            self._started_at = time.perf_counter()
            self._thread.start()

    @property
    def started(self) -> bool:
        """Whether the thread has been started."""
        return self._thread.ident is not None

    @property
    def running(self) -> bool:
        """Whether the thread has started and not ended."""
        return self._thread.is_alive() and not self._done.is_set()

    def done(self) -> bool:
        """Whether the thread has ended (built, failed or stopped)."""
        return self._done.is_set()

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the thread to end; whether it has."""
        return self._done.wait(timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """Ask the thread to stop after its current call and join it for at most ``timeout_s``.

        A thread not yet started never starts; a warmer still running is killed first and reaped for at
        most ``timeout_s`` + 1 s (so the whole call may take ``2 * timeout_s`` + 1 s).
        """
        self._stop.set()
        if self._warmer is not None:
            self._warmer.close(wait_s=timeout_s + 1.0)
        if self.started:
            self._thread.join(timeout_s)

    def build_here(self) -> None:
        """Build in the calling thread, in the owner's context (a compile warmer's process); raises."""
        if self._device.type == "cuda":
            give_thread_cudagraph_state()
        with self._context(), self._stream():
            self._build()

    def _run(self) -> None:
        try:
            self._wait_for_warmer()
            if not self._stop.is_set():
                before = _graph_counts()
                self.build_here()
                found, compiled = (after - then for after, then in zip(_graph_counts(), before, strict=True))
                if found or compiled:
                    self.cache_note = f"{found} graph(s) from the compile cache, {compiled} compiled"
        except BaseException as exc:  # reported by the agent on its own thread
            self.error = exc
        finally:
            self.seconds = time.perf_counter() - self._started_at
            self._done.set()

    def _wait_for_warmer(self) -> None:
        """Let the warmer fill the compile cache first (Note [compile warmer]); say how it ended."""
        warmer = self._warmer
        if warmer is None:
            return
        outcome = warmer.wait(WARMER_WAIT_S, stop=self._stop)
        if self._stop.is_set():
            return
        if outcome is None:
            log.warning("compile warmer still running after %.0f s; stopped, compiling here", WARMER_WAIT_S)
        elif outcome.ok:
            log.info("compile warmer done after %.1f s (%s); building from the cache", outcome.seconds,
                     outcome.detail)  # fmt: skip
        else:
            log.warning(
                "compile warmer failed after %.1f s (%s); compiling here", outcome.seconds, outcome.detail
            )
        warmer.close()

    @contextlib.contextmanager
    def _stream(self) -> Iterator[None]:
        """On CUDA: a stream of the thread's own, synchronised at the end (the switch reads its results)."""
        if self._device.type != "cuda":
            yield
            return
        stream = torch.cuda.Stream(self._device)  # type: ignore[no-untyped-call]
        if self._inputs_written is not None:  # the copies and the batch, on the agent's stream
            stream.wait_event(self._inputs_written)  # a device-side wait, no host synchronisation
        with torch.cuda.device(self._device), torch.cuda.stream(stream):
            try:
                yield
            finally:
                stream.synchronize()

    def _build(self) -> None:
        steps = UpdateSteps(self.model, self._cfg, self._precision, self.policy, self._device, None)
        critic, actor = steps.unwrapped
        size, batch, noise = self._size, self._batch, self._noise
        for call in range(_CALLS):
            if self.policy.graphs == "step":
                minibatch, rows = self._static, self._static_noise
            else:
                start = (call % self._views) * size
                minibatch, rows = batch.narrow(start, size), noise.narrow(0, start, size)
            for fn in (critic, actor):
                if self._stop.is_set():
                    return
                fn(minibatch, rows)
        if self.policy.compile_prepare:
            accumulate, normalize = self._preparation(self._prep)
            accumulate(batch.obs, batch.critic_obs)
            normalize(batch.obs, batch.next_obs, batch.critic_obs, batch.next_critic_obs)
        self.steps = steps

    def _preparation(self, owner: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
        """The agent class's batch preparation, compiled for ``owner``'s normalizers."""
        cls, backend = self._agent_type, self.policy.backend
        return (
            torch.compile(functools.partial(cls._accumulate_obs, owner), fullgraph=True, backend=backend),
            torch.compile(functools.partial(cls._normalize_obs, owner), fullgraph=True, backend=backend),
        )
