"""How the update steps run: one ``ExecutionPolicy`` value, chosen once per agent from its settings.

# Note [Ranks in step graphs]

With several ranks the gradients are averaged (one flattened all-reduce per model) between backward
and the optimizer step, so the step is not one compiled function: its backward half is compiled and
the step runs it, the all-reduce and the optimizer steps in turn. Without CUDA graphs every kernel of
that is launched from the learner's host thread. With ``capture_all_reduce`` (NCCL, ``cudagraph_scope
= step``) ``StepGraph`` captures the whole sequence, NCCL all-reduce included, which NCCL supports
(2.9 and later) and torch's NCCL watchdog tolerates (2.2 and later). NCCL requires that capturing is
collective: every rank captures the same collectives at the same point and then replays that graph
in the same order. Ranks in lockstep give that: they run the same number of critic and actor steps
in the same order (rank 0's decision is broadcast), and ``StepGraph`` warms up and captures at the
same call on every rank. The communicator already exists by then (the initial weight broadcast
creates it), and the warm-up all-reduces run for real on the side stream.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch

from .config import FastSACConfig
from .exceptions import ConfigError

__all__ = ["ExecutionPolicy", "Graphs"]

log = logging.getLogger(__name__)

Graphs = Literal["none", "regions", "step"]
"""CUDA graphs of the steps: none; torch.compile's per compiled region; one whole-step ``StepGraph``."""


@dataclass(frozen=True, kw_only=True)
class ExecutionPolicy:
    """How one agent runs its steps and batch preparation (``choose`` derives it from the settings).

    The steps are eager or compiled; ``in_halves`` when something must run eagerly between backward
    and the optimizer step (the gradient all-reduce of several ranks, fp16 loss scaling): then only the
    backward halves are compiled and the step runs them, the all-reduce and the optimizer steps in turn.
    """

    compile_steps: bool
    """torch.compile the critic and actor steps (whole, or their backward halves)."""
    compile_prepare: bool
    """torch.compile the batch preparation (normalizer statistics, normalisation), ``fullgraph``."""
    in_halves: bool
    """Run each step as backward, all-reduce over ranks, optimizer step (not one function): several
    ranks, fp16 loss scaling, or ``compile_optimizer=False`` (only the backward halves compile)."""
    graphs: Graphs
    """CUDA graphs of the steps; ``regions`` needs ``compile_steps`` and whole steps."""
    amp_dtype: torch.dtype | None
    """Autocast dtype of the losses; None: float32."""
    loss_scaling: bool
    """fp16 loss scaling through a GradScaler (needs ``in_halves``)."""
    background: bool = False
    """Start with the interim steps (``interim``) and build the compiled ones in a background thread,
    switching at an update boundary once they are ready (Note [Compile in the background]); needs
    ``compile_steps``, whole steps (one rank, no loss scaling) and no ``regions`` graphs."""
    backend: str | Callable[..., Any] = "inductor"
    """torch.compile's backend for the steps and the batch preparation (tests use lighter ones)."""

    def __post_init__(self) -> None:
        if self.graphs == "regions" and (self.in_halves or not self.compile_steps):
            raise ConfigError(
                f"graphs='regions' needs compiled whole steps, got compile_steps={self.compile_steps}, "
                f"in_halves={self.in_halves}; use graphs='step' or 'none'"
            )
        if self.loss_scaling and not self.in_halves:
            raise ConfigError("loss_scaling=True needs in_halves=True (the scaler steps eagerly)")
        if self.background and (not self.compile_steps or self.in_halves or self.graphs == "regions"):
            raise ConfigError(
                f"background=True needs compiled whole steps without region graphs, got compile_steps="
                f"{self.compile_steps}, in_halves={self.in_halves}, graphs={self.graphs!r}; "
                "use background=False"
            )

    def interim(self) -> ExecutionPolicy:
        """The steps a background compile trains with until its compiled ones are ready.

        Eager steps and preparation (no compile); whole-step graphs stay, each captured around the eager
        step (faster than the uncaptured eager step: ``wiki/benchmarks.md``, "Learner" and "Compile in
        the background"). Region graphs need a compile, so they go (a background compile refuses them).
        """
        graphs: Graphs = "step" if self.graphs == "step" else "none"
        return replace(self, compile_steps=False, compile_prepare=False, graphs=graphs, background=False)

    @classmethod
    def choose(cls, cfg: FastSACConfig, device: torch.device, world_size: int) -> ExecutionPolicy:
        """The policy of ``cfg`` on ``device`` with ``world_size`` ranks (CPU: eager, no graphs, no AMP)."""
        cuda = device.type == "cuda"
        amp = cfg.amp and cuda
        loss_scaling = amp and cfg.amp_dtype == "fp16"
        graphs: Graphs = "none"
        # Several ranks: a whole-step graph holds the NCCL all-reduce too (Note [Ranks in step graphs]).
        if cuda and cfg.cudagraphs and not loss_scaling and (world_size == 1 or cfg.capture_all_reduce):
            if cfg.cudagraph_scope == "step":
                graphs = "step"
            elif cfg.compile and world_size == 1:
                graphs = "regions"
        if cfg.capture_all_reduce and world_size > 1 and cuda and graphs != "step":
            log.warning(
                "capture_all_reduce=True has no effect: it needs cudagraphs=True, cudagraph_scope='step' "
                "and no fp16 loss scaling (cudagraphs=%s, cudagraph_scope=%r, amp=%s, amp_dtype=%r)",
                cfg.cudagraphs, cfg.cudagraph_scope, cfg.amp, cfg.amp_dtype,
            )  # fmt: skip
        # compile_optimizer=False: the backward halves only (the config refuses it with region graphs).
        in_halves = world_size > 1 or loss_scaling or (cuda and cfg.compile and not cfg.compile_optimizer)
        # Several ranks compile up front: their switch would have to be collective (Note [Compile in
        # the background]); so do torch.compile's region graphs, which are bound to one thread.
        background = cuda and cfg.compile and cfg.compile_in_background and not in_halves
        return cls(
            compile_steps=cuda and cfg.compile,
            compile_prepare=cuda and cfg.compile,
            in_halves=in_halves,
            graphs=graphs,
            amp_dtype=(torch.bfloat16 if cfg.amp_dtype == "bf16" else torch.float16) if amp else None,
            loss_scaling=loss_scaling,
            background=background and graphs != "regions",
        )
