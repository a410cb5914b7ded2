"""One update step (forward, backward, optimizer step) replayed as a single CUDA graph.

# Note [Whole-step graphs]

``torch.compile(mode="reduce-overhead")`` captures CUDA graphs per *compiled region*. An update step
calls ``backward()``, where dynamo breaks the graph, so a step is several regions stitched together
by the autograd engine on the host, each with its guards, its cache lookup and its replay. On the
H200 that costs about 2.4 ms of host time per update against 1.7 ms of GPU time: the learner is
host-bound (wiki/benchmarks.md, Learner), and every other host task of the learner adds to it.

``StepGraph`` instead captures the whole step, backward and optimizer step included, as one graph
with ``torch.cuda.graph``, the way PyTorch documents whole-network capture:

1. Every call copies its inputs into static tensors, allocated at the first call (on the current
   stream); an input given twice (the same tensor object) has one static tensor. The step only ever
   sees those tensors: a compiled step is traced and guarded on exactly what the capture will use (a
   view's storage offset, for one, can be guarded once a dimension is dynamic, and a recompile during
   capture fails).
2. The first ``warmup`` calls run the step normally on the static inputs, on a side stream of the
   step's device (lazy compilation, cuBLAS workspaces and the optimizers' state all happen outside
   capture). They are real updates.
3. The next call captures the step on that same side stream. Capture records kernels without running
   them, so that call then replays the graph once: every call is exactly one update. The step sets
   gradients to ``None`` first, so ``backward`` inside the capture allocates them from the graph's
   private pool, where each replay refills them.
4. Every later call copies its inputs into the static tensors and replays, on the current stream.

What the step touches must stay where it was captured: parameters, gradients, optimizer state
(``capturable`` optimizers keep their step counts on the device), static inputs. Anything that
replaces those tensors (``load_state_dict`` of an optimizer) must ``reset`` the graph first, and
the next calls warm up and capture again; so do arguments of new shapes. Autocast must run with
``cache_enabled=False`` (its weight cache would hold casts made during capture). The step must not
synchronise with the host. The returned tensors are clones: the graph's outputs are overwritten by
the next replay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ._batch import distinct_tensors

__all__ = ["StepGraph"]

Arg = Tensor | tuple[Tensor, ...]
"""A step argument: a tensor, or a named tuple of tensors (``Batch``)."""


def _flatten(args: Sequence[Arg]) -> list[Tensor]:
    flat: list[Tensor] = []
    for arg in args:
        flat.extend(arg if isinstance(arg, tuple) else (arg,))
    return flat


def _rebuild(like: Sequence[Arg], flat: Sequence[Tensor]) -> list[Arg]:
    """``like``'s structure with the tensors of ``flat`` (in ``_flatten`` order)."""
    out: list[Arg] = []
    i = 0
    for arg in like:
        if isinstance(arg, tuple):
            items = tuple(flat[i : i + len(arg)])
            out.append(items if type(arg) is tuple else type(arg)(*items))  # a plain or a named tuple
            i += len(arg)
        else:
            out.append(flat[i])
            i += 1
    return out


class StepGraph:
    """A step function run as one CUDA graph after ``warmup`` normal calls (Note [Whole-step graphs]).

    Args:
        fn: The step: takes tensors or named tuples of tensors of fixed shapes, returns a tuple of
            tensors; no host synchronisation inside.
        device: The CUDA device it runs on.
        warmup: Normal calls before the capture (at least 2).
        may_capture: Asked before a capture is due; while it says False, calls go on like warm-up
            calls (a capture fails when another thread of the process synchronises the device during
            it, as a background compile does: Note [Compile in the background]). None: always.
    """

    def __init__(
        self,
        fn: Callable[..., tuple[Tensor, ...]],
        device: torch.device,
        *,
        warmup: int = 3,
        may_capture: Callable[[], bool] | None = None,
    ) -> None:
        if device.type != "cuda":
            raise ValueError(f"StepGraph needs a CUDA device, got {device}; run the step directly on CPU")
        self._fn = fn
        self._device = device
        # At least two: a compiled step builds the optimizers' state while its first call is traced,
        # and dynamo guards that state by identity, so the second call compiles again; a guard that
        # first fails at capture would need a compile during capture, which torch refuses.
        self._warmup = max(2, warmup)
        self._calls = 0
        self._graph: torch.cuda.CUDAGraph | None = None
        self._static_in: list[Tensor] = []
        self._static_out: tuple[Tensor, ...] = ()
        self._signature: tuple[object, ...] = ()
        self._side: torch.cuda.Stream | None = None
        self._may_capture = may_capture

    @property
    def captured(self) -> bool:
        """Whether the step is captured (calls replay it)."""
        return self._graph is not None

    def reset(self) -> None:
        """Drop the graph (tensors it captured were replaced): the next calls warm up and capture again.

        Safe at any point between calls: every side-stream use starts after the current stream's
        work and every call ends with the current stream after the side stream's, so memory freed
        here (static inputs, the graph's pool) is never reused under a running kernel.
        """
        self._graph = None
        self._static_in, self._static_out, self._signature = [], (), ()
        self._calls = 0

    def __call__(self, *args: Arg) -> tuple[Tensor, ...]:
        """One step on ``args``; returns its outputs (clones, safe to keep).

        Arguments of other shapes or dtypes than the static inputs start over: warm-up, then a capture
        for the new shapes (a copy into the old static inputs would broadcast silently).
        """
        # An argument given twice gets one static input, copied once; the step sees it twice, as given.
        distinct, positions = distinct_tensors(_flatten(args))
        signature = (*((t.shape, t.dtype) for t in distinct), tuple(positions))
        if signature != self._signature:
            self.reset()
            self._static_in = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in distinct]
            self._signature = signature
        for static, tensor in zip(self._static_in, distinct, strict=True):
            static.copy_(tensor, non_blocking=True)
        static_args = _rebuild(args, [self._static_in[k] for k in positions])
        if self._graph is None:
            if self._calls < self._warmup or (self._may_capture is not None and not self._may_capture()):
                self._calls += 1
                return self._on_side_stream(static_args)
            self._capture(static_args)
        assert self._graph is not None
        with torch.cuda.device(self._device):
            self._graph.replay()
        return tuple(t.clone() for t in self._static_out)

    def _side_stream(self) -> torch.cuda.Stream:
        if self._side is None:
            self._side = torch.cuda.Stream(self._device)  # type: ignore[no-untyped-call]
        return self._side

    def _on_side_stream(self, static_args: Sequence[Arg]) -> tuple[Tensor, ...]:
        current = torch.cuda.current_stream(self._device)
        side = self._side_stream()
        side.wait_stream(current)  # the static inputs were just written on the current stream
        try:
            with torch.cuda.stream(side):
                out = tuple(self._fn(*static_args))
        finally:  # even after an error, later work on the current stream comes after the side's
            current.wait_stream(side)
        for tensor in out:  # made on the side stream, read on the current one
            tensor.record_stream(current)
        return out

    def _capture(self, static_args: Sequence[Arg]) -> None:
        graph = torch.cuda.CUDAGraph()
        # torch.cuda.graph synchronises the current device and captures on the stream it is given
        # (the warm-up's, on the step's device); nothing it records runs until the replay.
        try:
            with torch.cuda.graph(graph, stream=self._side_stream()):
                self._static_out = tuple(self._fn(*static_args))
        except Exception as exc:
            self.reset()
            raise RuntimeError(
                f"capturing the update step as one CUDA graph failed: {exc}; "
                "set cudagraph_scope='regions' (torch.compile's graphs) to train without it"
            ) from exc
        self._graph = graph
