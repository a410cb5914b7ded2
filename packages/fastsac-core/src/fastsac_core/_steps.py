"""The critic and actor update steps (losses, backward, optimizer steps), run as the policy says.

A critic step: zero the gradients, the critic and alpha losses under autocast, backward, (several
ranks: average the gradients), clip and step the critics' and alpha's optimizers, then the soft target
update ``qf_target <- lerp(qf_target, qf, tau)``. An actor step: the same for the actor's loss and
optimizer. ``ExecutionPolicy`` says whether each step is one (compiled) function or its backward half
(compiled) followed by the eager rest, and whether CUDA graphs replay it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from . import _losses
from ._compile_cache import use_compile_cache
from ._distributed import ProcessGroup, all_reduce_grads
from ._execution import ExecutionPolicy
from ._model import SACModel
from ._precision import Precision
from ._replay import Batch
from ._step_graph import StepGraph
from .config import FastSACConfig

__all__ = ["UpdateSteps", "quiet_compile_notices"]

_PROFILER_NOTICE_LOGGER = "torch._dynamo.variables.ctx_manager"


class _DropProfilerNotice(logging.Filter):
    """Drops dynamo's "Profiler record function ... will be ignored" notice (the optimizers' ranges)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Profiler record function")


def quiet_compile_notices() -> None:
    """Keep dynamo's notice about the optimizers' profiler ranges off the console (idempotent).

    ``torch.optim`` wraps ``step`` and ``zero_grad`` in ``record_function``; compiling them makes dynamo
    log, once per process at WARNING, that those ranges are not traced. It says nothing about the run
    and would land in the middle of the live console.
    """
    logger = logging.getLogger(_PROFILER_NOTICE_LOGGER)
    if not any(isinstance(f, _DropProfilerNotice) for f in logger.filters):
        logger.addFilter(_DropProfilerNotice())


class UpdateSteps:
    """The critic and actor steps of one agent, built once as ``policy`` says.

    Args:
        model: The networks and optimizers the steps train.
        cfg: Hyper-parameters (``tau``, ``autotune``, ``max_grad_norm``).
        precision: Autocast and loss scaling.
        policy: How the steps run.
        device: The learner device.
        process_group: Group whose ranks average gradients (``policy.in_halves``).
        may_capture: With ``graphs="step"``: whether a due capture may happen now (``StepGraph``).
    """

    def __init__(
        self,
        model: SACModel,
        cfg: FastSACConfig,
        precision: Precision,
        policy: ExecutionPolicy,
        device: torch.device,
        process_group: ProcessGroup | None,
        may_capture: Callable[[], bool] | None = None,
    ) -> None:
        self.model, self.cfg, self.precision, self.policy = model, cfg, precision, policy
        self.process_group = process_group
        if policy.compile_steps:
            use_compile_cache()  # before the first compile (Note [compile cache])
            quiet_compile_notices()
        critic: Callable[..., Any] = self._critic_step
        actor: Callable[..., Any] = self._actor_step
        if policy.in_halves:
            critic_backward: Callable[..., Any] = self._critic_backward
            actor_backward: Callable[..., Any] = self._actor_backward
            if policy.compile_steps:
                critic_backward = torch.compile(critic_backward, backend=policy.backend)
                actor_backward = torch.compile(actor_backward, backend=policy.backend)
            critic = functools.partial(self._critic_step_in_halves, critic_backward)
            actor = functools.partial(self._actor_step_in_halves, actor_backward)
        elif policy.compile_steps:
            mode = "reduce-overhead" if policy.graphs == "regions" else None
            critic = torch.compile(critic, mode=mode, backend=policy.backend)
            actor = torch.compile(actor, mode=mode, backend=policy.backend)
        self.unwrapped: tuple[Callable[..., Any], Callable[..., Any]] = (critic, actor)
        """The critic and actor steps as compiled, before a ``StepGraph`` wraps them (a background
        compile runs these on a scratch copy; Note [Compile in the background])."""
        if policy.graphs == "step":
            critic = StepGraph(critic, device, may_capture=may_capture)
            actor = StepGraph(actor, device, may_capture=may_capture)
        self.critic: Callable[..., Any] = critic
        """``(minibatch, next_noise) -> (qf_loss, alpha_loss, qf_max)``, as ``run`` calls it."""
        self.actor: Callable[..., Any] = actor
        """``(minibatch, noise) -> (actor_loss, policy_entropy)``, as ``run`` calls it."""

    def run(self, fn: Callable[..., Any], *args: Tensor | Batch) -> tuple[Tensor, ...]:
        """Call ``self.critic`` or ``self.actor``; the returned tensors are safe to keep."""
        if self.policy.graphs == "step":
            return tuple(fn(*args))  # StepGraph returns clones of its graph's outputs
        if self.policy.graphs == "regions":
            torch.compiler.cudagraph_mark_step_begin()  # type: ignore[no-untyped-call]
            # Outputs live in the CUDA-graph pool and are overwritten by the next replay.
            return tuple(t.clone() for t in fn(*args))
        return tuple(fn(*args))

    def reset(self) -> None:
        """Captured steps refer to tensors a load replaced: capture again (Note [Whole-step graphs])."""
        for fn in (self.critic, self.actor):
            if isinstance(fn, StepGraph):
                fn.reset()

    # ------------------------------------------------------------------ critic

    def _critic_backward(self, batch: Batch, next_noise: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Critic (and alpha) losses and their gradients; returns detached (qf_loss, alpha_loss, qf_max)."""
        m = self.model
        m.critic_optimizer.zero_grad(set_to_none=True)
        m.alpha_optimizer.zero_grad(set_to_none=True)
        with self.precision.autocast():
            qf_loss, alpha_loss, qf_max = _losses.critic_loss(
                batch, next_noise, actor=m.actor, qf=m.qf, qf_target=m.qf_target, log_alpha=m.log_alpha,
                target_entropy=m.target_entropy, autotune=self.cfg.autotune,
            )  # fmt: skip
        self.precision.scaled(qf_loss + alpha_loss).backward()  # type: ignore[no-untyped-call]
        return qf_loss.detach(), alpha_loss.detach(), qf_max.float()

    def _critic_apply(self) -> None:
        """Optimizer steps of the critics and alpha, then the soft target update."""
        m = self.model
        optimizers = [m.critic_optimizer] + ([m.alpha_optimizer] if self.cfg.autotune else [])
        self.precision.step(optimizers, m.qf.parameters(), self.cfg.max_grad_norm)
        with torch.no_grad():
            targets: list[Tensor] = list(m.qf_target.parameters())
            online: list[Tensor] = list(m.qf.parameters())
            torch._foreach_lerp_(targets, online, self.cfg.tau)

    def _critic_step(self, batch: Batch, next_noise: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        metrics = self._critic_backward(batch, next_noise)
        self._critic_apply()
        return metrics

    def _critic_step_in_halves(
        self, backward: Callable[..., tuple[Tensor, Tensor, Tensor]], batch: Batch, next_noise: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``backward`` (compiled or not), the gradients averaged over ranks, the optimizer steps."""
        metrics = backward(batch, next_noise)
        all_reduce_grads(self.model.critic_params(), self.process_group)  # critics and log_alpha together
        self._critic_apply()
        return metrics

    # ------------------------------------------------------------------ actor

    def _actor_backward(self, batch: Batch, noise: Tensor) -> tuple[Tensor, Tensor]:
        """Actor loss and its gradient; returns detached (actor_loss, policy_entropy)."""
        m = self.model
        m.actor_optimizer.zero_grad(set_to_none=True)
        with self.precision.autocast():
            actor_loss, log_probs = _losses.actor_loss(
                batch, noise, actor=m.actor, qf=m.qf, log_alpha=m.log_alpha
            )
        self.precision.scaled(actor_loss).backward()  # type: ignore[no-untyped-call]
        return actor_loss.detach(), -log_probs.detach().float().mean()

    def _actor_apply(self) -> None:
        self.precision.step(
            [self.model.actor_optimizer], self.model.actor.parameters(), self.cfg.max_grad_norm
        )

    def _actor_step(self, batch: Batch, noise: Tensor) -> tuple[Tensor, Tensor]:
        metrics = self._actor_backward(batch, noise)
        self._actor_apply()
        return metrics

    def _actor_step_in_halves(
        self, backward: Callable[..., tuple[Tensor, Tensor]], batch: Batch, noise: Tensor
    ) -> tuple[Tensor, Tensor]:
        """``backward`` (compiled or not), the gradients averaged over ranks, the optimizer step."""
        metrics = backward(batch, noise)
        all_reduce_grads(self.model.actor.parameters(), self.process_group)
        self._actor_apply()
        return metrics
