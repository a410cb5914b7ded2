"""One update step (forward, backward, optimizer step) replayed as a single CUDA graph.

# Note [Whole-step graphs]

``torch.compile(mode="reduce-overhead")`` captures CUDA graphs per *compiled region*. An update step
calls ``backward()``, where dynamo breaks the graph, so a step is several regions stitched together
by the autograd engine on the host, each with its guards, its cache lookup and its replay. On the
H200 that costs about 2.4 ms of host time per update against 1.7 ms of GPU time: the learner is
host-bound (wiki/benchmarks.md, Learner), and every other host task of the learner adds to it.

``StepGraph`` instead captures the whole step, backward and optimizer step included, as one graph
with ``torch.cuda.graph``, the way PyTorch documents whole-network capture:

1. The first ``warmup`` calls run the step normally, on a side stream (lazy compilation, autotuning,
   cuBLAS workspaces and the optimizers' state all happen outside capture). They are real updates.
2. The next call copies its inputs into static tensors and captures the step on them. Capture
   records kernels without running them, so that call then replays the graph once: every call is
   exactly one update. The step function sets gradients to ``None`` first, so ``backward`` inside
   the capture allocates them from the graph's private pool, where each replay refills them.
3. Every later call copies its inputs into the static tensors (on the current stream) and replays.

What the step touches must stay where it was captured: parameters, gradients, optimizer state
(``capturable`` optimizers keep their step counts on the device), static inputs. Anything that
replaces those tensors (``load_state_dict`` of an optimizer) must ``reset`` the graph, and the next
calls warm up and capture again. Autocast must run with ``cache_enabled=False`` (its weight cache
would hold casts made during capture). The step must not synchronise with the host. The returned
tensors are clones: the graph's outputs are overwritten by the next replay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

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
            out.append(type(arg)(*flat[i : i + len(arg)]))
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
        warmup: Normal calls before the capture (at least 1).
    """

    def __init__(
        self, fn: Callable[..., tuple[Tensor, ...]], device: torch.device, *, warmup: int = 3
    ) -> None:
        if device.type != "cuda":
            raise ValueError(f"StepGraph needs a CUDA device, got {device}; run the step directly on CPU")
        self._fn = fn
        self._device = device
        self._warmup = max(1, warmup)
        self._calls = 0
        self._graph: torch.cuda.CUDAGraph | None = None
        self._static_in: list[Tensor] = []
        self._static_out: tuple[Tensor, ...] = ()
        self._signature: tuple[tuple[torch.Size, torch.dtype], ...] = ()
        self._side: torch.cuda.Stream | None = None

    @property
    def captured(self) -> bool:
        """Whether the step is captured (calls replay it)."""
        return self._graph is not None

    def reset(self) -> None:
        """Drop the graph (tensors it captured were replaced): the next calls warm up and capture again."""
        self._graph = None
        self._static_in, self._static_out, self._signature = [], (), ()
        self._calls = 0

    def __call__(self, *args: Arg) -> tuple[Tensor, ...]:
        """One step on ``args``; returns its outputs (clones, safe to keep).

        Arguments of other shapes or dtypes than the captured ones start over: warm-up, then a capture
        for the new shapes (a copy into the old static inputs would broadcast silently).
        """
        flat = _flatten(args)
        signature = tuple((t.shape, t.dtype) for t in flat)
        if self._graph is not None and signature != self._signature:
            self.reset()
        if self._graph is None:
            if self._calls < self._warmup:
                self._calls += 1
                return self._on_side_stream(args)
            self._capture(args)
            self._signature = signature
        else:
            for static, tensor in zip(self._static_in, flat, strict=True):
                static.copy_(tensor, non_blocking=True)
        assert self._graph is not None
        self._graph.replay()
        return tuple(t.clone() for t in self._static_out)

    def _on_side_stream(self, args: Sequence[Arg]) -> tuple[Tensor, ...]:
        current = torch.cuda.current_stream(self._device)
        if self._side is None:
            self._side = torch.cuda.Stream(self._device)  # type: ignore[no-untyped-call]
        self._side.wait_stream(current)
        with torch.cuda.stream(self._side):
            out = tuple(self._fn(*args))
        current.wait_stream(self._side)
        # Cross-stream lifetimes: the inputs were read on the side stream, the outputs made there are
        # read on the current one; the allocator must not hand either out again before those uses.
        for tensor in _flatten(args):
            tensor.record_stream(self._side)
        for tensor in out:
            tensor.record_stream(current)
        return out

    def _capture(self, args: Sequence[Arg]) -> None:
        self._static_in = [t.detach().clone() for t in _flatten(args)]
        static_args: list[Any] = _rebuild(args, self._static_in)
        graph = torch.cuda.CUDAGraph()
        # torch.cuda.graph synchronises the device and captures on a private stream; nothing it
        # records runs until the caller's replay.
        try:
            with torch.cuda.graph(graph):
                self._static_out = tuple(self._fn(*static_args))
        except Exception as exc:
            self.reset()
            raise RuntimeError(
                f"capturing the update step as one CUDA graph failed: {exc}; "
                "set cudagraph_scope='regions' (torch.compile's graphs) to train without it"
            ) from exc
        self._graph = graph
