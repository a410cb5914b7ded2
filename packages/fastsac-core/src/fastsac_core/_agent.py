"""The FastSAC learner: networks, optimizers, normalizers, replay buffer and the update steps.

Update rules follow holosoma FastSAC (``fast_sac_agent.py``, see wiki/algorithm.md):
  * every critic i is trained by cross-entropy against the C51 projection of ITS OWN target
    critic's distribution at (s', a' ~ pi(s')), the entropy folded into the reward before projection:
    r - discount * bootstrap * alpha * log pi(a'|s');
  * alpha is tuned inside the critic step from the next-state log-probs;
  * the soft target update is part of the critic step;
  * actor loss = alpha * log pi(a|s) - mean_i E[Q_i(s, a)], every ``policy_frequency`` critic updates.

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

import contextlib
import copy
import functools
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F  # noqa: N812 - the conventional name
from torch import Tensor

from ._distributed import ProcessGroup, all_reduce_grads, broadcast_tensors, sync_normalizer_stats
from ._flat import flatten_into, numel_of, unflatten_into
from ._networks import Actor, DistributionalCritic
from ._normalizer import EmpiricalNormalizer
from ._replay import Batch, ReplayBuffer
from ._step_graph import StepGraph
from .config import FastSACConfig
from .env import EnvDims
from .exceptions import ConfigError

__all__ = ["FastSACAgent", "UpdateNoise", "build_actor", "sync_normalizers"]

log = logging.getLogger(__name__)


_PROFILER_NOTICE_LOGGER = "torch._dynamo.variables.ctx_manager"

Observations = tuple[Tensor, Tensor, Tensor, Tensor]
"""Normalised ``(obs, next_obs, critic_obs, next_critic_obs)``."""


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


class UpdateNoise(NamedTuple):
    """Standard-normal noise of one ``update`` call (rows match the sampled batch)."""

    next_actions: Tensor
    """(rows, act_dim) noise of a' ~ pi(s') in the critic steps."""
    actions: Tensor
    """(rows, act_dim) noise of a ~ pi(s) in the actor steps."""


def build_actor(dims: EnvDims, cfg: FastSACConfig) -> Actor:
    """The actor network of ``cfg`` for a task of ``dims`` (shared by the agent and ``InferencePolicy``)."""
    return Actor(
        dims.obs_dim,
        dims.act_dim,
        cfg.actor_hidden_dim,
        dims.action_low,
        dims.action_high,
        cfg.log_std_min,
        cfg.log_std_max,
        cfg.use_layer_norm,
    )


def _validate(dims: EnvDims, cfg: FastSACConfig, num_envs: int, world_size: int) -> int:
    """Check the settings the agent depends on; return the per-env batch of one update on this rank."""
    if cfg.num_atoms < 2 or cfg.v_max <= cfg.v_min:
        raise ConfigError(
            f"num_atoms={cfg.num_atoms}, v_min={cfg.v_min}, v_max={cfg.v_max} give no C51 support;"
            " use num_atoms >= 2 and v_min < v_max"
        )
    if cfg.policy_frequency < 1 or cfg.num_steps < 1:
        raise ConfigError(
            f"policy_frequency={cfg.policy_frequency} and num_steps={cfg.num_steps} must both be >= 1"
        )
    if len(dims.action_low) != dims.act_dim or len(dims.action_high) != dims.act_dim:
        raise ConfigError(f"action bounds have {len(dims.action_low)} entries; act_dim={dims.act_dim}")
    batch_per_env = cfg.batch_size // world_size // num_envs
    if batch_per_env < 1:
        raise ConfigError(
            f"batch_size={cfg.batch_size} gives no sample per env with world_size={world_size} and"
            f" num_envs={num_envs} per learner; use batch_size >= {world_size * num_envs}"
        )
    if batch_per_env * world_size * num_envs != cfg.batch_size:
        log.warning(
            "batch_size=%d is not a multiple of world_size*num_envs=%d; each update uses %d samples",
            cfg.batch_size,
            world_size * num_envs,
            batch_per_env * world_size * num_envs,
        )
    return batch_per_env


class FastSACAgent:
    """FastSAC learner state and updates for one rank.

    Args:
        dims: Task dimensions and action bounds.
        cfg: Hyper-parameters.
        device: Learner device (networks and, by default, the replay buffer).
        num_envs: Envs whose transitions this rank's replay buffer receives.
        world_size: Learner ranks (gradients are averaged over them).
        process_group: torch.distributed group of the learners (default group when ``None``).
        buffer_device: Replay storage device when it differs from ``device`` (e.g. CPU to save GPU memory).
        env_blocks: Widths of the replay buffer's env blocks, each written at its own pace (one per
            collector under ragged ingest); None is one block.
    """

    def __init__(
        self,
        dims: EnvDims,
        cfg: FastSACConfig,
        device: torch.device | str,
        *,
        num_envs: int,
        world_size: int = 1,
        process_group: ProcessGroup | None = None,
        buffer_device: torch.device | str | None = None,
        env_blocks: Sequence[int] | None = None,
    ) -> None:
        self.dims, self.cfg = dims, cfg
        self.device = torch.device(device)
        self.num_envs, self.world_size, self.process_group = num_envs, world_size, process_group
        self.batch_per_env = _validate(dims, cfg, num_envs, world_size)
        self.update_idx = 0
        """Critic updates done so far (persistent across calls; gates the actor step)."""

        self.actor = build_actor(dims, cfg).to(self.device)
        self.qf = DistributionalCritic(
            dims.critic_obs_dim,
            dims.act_dim,
            cfg.critic_hidden_dim,
            cfg.num_atoms,
            cfg.v_min,
            cfg.v_max,
            cfg.num_q_networks,
            cfg.use_layer_norm,
        ).to(self.device)
        self.log_alpha = torch.tensor(math.log(cfg.alpha_init), device=self.device, requires_grad=True)
        if world_size > 1:  # identical initial weights on every rank
            broadcast_tensors(
                [*self.actor.parameters(), *self.qf.parameters(), self.log_alpha], 0, process_group
            )
        self.qf_target = copy.deepcopy(self.qf).requires_grad_(False)
        self.target_entropy = -dims.act_dim * cfg.target_entropy_ratio

        cuda = self.device.type == "cuda"
        self._amp_dtype = torch.bfloat16 if cfg.amp_dtype == "bf16" else torch.float16
        self._amp = cfg.amp and cuda
        fp16_scaling = self._amp and cfg.amp_dtype == "fp16"
        # One compiled function per step when nothing eager must sit between backward and optimizer
        # step; otherwise (all-reduce across ranks, fp16 loss scaling) only the backward halves are
        # compiled and the step runs them, the all-reduce and the optimizer steps in turn.
        self._fused_steps = world_size == 1 and not fp16_scaling
        # Several ranks: a whole-step graph holds the NCCL all-reduce too (Note [Ranks in step graphs]).
        graphs = cuda and cfg.cudagraphs and not fp16_scaling and (world_size == 1 or cfg.capture_all_reduce)
        self._cudagraphs = graphs and self._fused_steps and cfg.compile and cfg.cudagraph_scope == "regions"
        self._step_graphs = graphs and cfg.cudagraph_scope == "step"
        if cfg.capture_all_reduce and world_size > 1 and cuda and not self._step_graphs:
            log.warning(
                "capture_all_reduce=True has no effect: it needs cudagraphs=True, cudagraph_scope='step' "
                "and no fp16 loss scaling (cudagraphs=%s, cudagraph_scope=%r, amp=%s, amp_dtype=%r)",
                cfg.cudagraphs, cfg.cudagraph_scope, cfg.amp, cfg.amp_dtype,
            )  # fmt: skip

        betas = (cfg.adam_beta1, cfg.adam_beta2)
        # Captured optimizer steps keep their step counts on the device (Note [Whole-step graphs]).
        fused, capturable = cuda, self._step_graphs
        self.critic_optimizer = torch.optim.AdamW(
            self.qf.parameters(), lr=cfg.critic_lr, betas=betas, weight_decay=cfg.weight_decay,
            fused=fused, capturable=capturable,
        )  # fmt: skip
        self.actor_optimizer = torch.optim.AdamW(
            self.actor.parameters(), lr=cfg.actor_lr, betas=betas, weight_decay=cfg.weight_decay,
            fused=fused, capturable=capturable,
        )  # fmt: skip
        self.alpha_optimizer = torch.optim.Adam(
            [self.log_alpha], lr=cfg.alpha_lr, betas=betas, fused=fused, capturable=capturable
        )

        eps, on = cfg.normalizer_eps, cfg.obs_normalization
        self.obs_normalizer = EmpiricalNormalizer(dims.obs_dim, eps, enabled=on, device=self.device)
        # A critic that observes obs shares its normalizer too (one set of statistics, fed once).
        self.critic_obs_normalizer = (
            self.obs_normalizer
            if dims.critic_obs_is_obs
            else EmpiricalNormalizer(dims.critic_obs_dim, eps, enabled=on, device=self.device)
        )
        self.normalizers = list(dict.fromkeys([self.obs_normalizer, self.critic_obs_normalizer]))
        """The distinct normalizers (one when the critic observes obs)."""
        self.buffer = ReplayBuffer(
            num_envs,
            cfg.buffer_size,
            dims.obs_dim,
            dims.stored_critic_obs_dim,
            dims.act_dim,
            device=buffer_device if buffer_device is not None else self.device,
            n_steps=cfg.num_steps,
            gamma=cfg.gamma,
            blocks=env_blocks,
        )

        self.scaler = torch.amp.GradScaler("cuda", enabled=fp16_scaling)
        self._critic_fn, self._actor_fn = self._build_step_functions(cuda and cfg.compile)
        # Compiled with the steps: 645 against 615 updates/s on the H200 (wiki/benchmarks.md, Learner).
        self._accumulate_fn, self._normalize_fn = self._build_prepare_functions(cuda and cfg.compile)
        zero = torch.zeros((), device=self.device)
        self._last_actor_metrics = (zero, zero.clone())

    # ------------------------------------------------------------------ execution setup

    def _build_step_functions(self, compile_steps: bool) -> tuple[Callable[..., Any], Callable[..., Any]]:
        """The critic and actor steps as ``update`` runs them: backward, all-reduce, optimizer step."""
        if compile_steps:
            quiet_compile_notices()
        if self._fused_steps:
            critic: Callable[..., Any] = self._critic_step
            actor: Callable[..., Any] = self._actor_step
            if compile_steps:
                mode = "reduce-overhead" if self._cudagraphs else None
                critic, actor = torch.compile(critic, mode=mode), torch.compile(actor, mode=mode)
        else:
            critic_backward: Callable[..., Any] = self._critic_backward
            actor_backward: Callable[..., Any] = self._actor_backward
            if compile_steps:
                critic_backward = torch.compile(critic_backward)
                actor_backward = torch.compile(actor_backward)
            critic = functools.partial(self._critic_step_in_halves, critic_backward)
            actor = functools.partial(self._actor_step_in_halves, actor_backward)
        if self._step_graphs:
            critic, actor = StepGraph(critic, self.device), StepGraph(actor, self.device)
        return critic, actor

    def _build_prepare_functions(
        self, compile_prepare: bool
    ) -> tuple[Callable[[Tensor, Tensor], None], Callable[[Tensor, Tensor, Tensor, Tensor], Observations]]:
        """The batch preparation's two halves around the normalizer merge, eager or compiled.

        Eagerly, the normalizers' statistics and the normalisation are a dozen memory-bound passes
        over the sampled rows (float64 temporaries included); compiled, each half fuses into a few
        kernels. ``fullgraph``: a graph break raises instead of silently running pieces eagerly.
        """
        accumulate: Callable[[Tensor, Tensor], None] = self._accumulate_obs
        normalize: Callable[[Tensor, Tensor, Tensor, Tensor], Observations] = self._normalize_obs
        if compile_prepare:
            accumulate = torch.compile(accumulate, fullgraph=True)
            normalize = torch.compile(normalize, fullgraph=True)
        return accumulate, normalize

    def _reset_step_graphs(self) -> None:
        """Captured steps refer to tensors a load replaced: capture again (Note [Whole-step graphs])."""
        for fn in (self._critic_fn, self._actor_fn):
            if isinstance(fn, StepGraph):
                fn.reset()

    def _autocast(self) -> contextlib.AbstractContextManager[None]:
        if not self._amp:
            return contextlib.nullcontext()
        # A captured step must not cache weight casts (they would be made during capture).
        return torch.autocast("cuda", dtype=self._amp_dtype, cache_enabled=not self._step_graphs)

    def _critic_params(self) -> Iterator[Tensor]:
        yield from self.qf.parameters()
        yield self.log_alpha

    # ------------------------------------------------------------------ the update math

    def _critic_backward(self, batch: Batch, next_noise: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Critic (and alpha) losses and their gradients; returns detached (qf_loss, alpha_loss, qf_max)."""
        self.critic_optimizer.zero_grad(set_to_none=True)
        self.alpha_optimizer.zero_grad(set_to_none=True)
        with self._autocast():
            with torch.no_grad():
                next_actions, next_log_probs, _ = self.actor.sample(batch.next_obs, next_noise)
                alpha = self.log_alpha.exp()
                soft_rewards = batch.rewards - batch.discount * batch.bootstrap * alpha * next_log_probs
                next_probs = F.softmax(self.qf_target(batch.next_critic_obs, next_actions).float(), dim=-1)
                target_dist = self.qf.project(next_probs, soft_rewards, batch.bootstrap * batch.discount)
                qf_max = self.qf.expected_value(target_dist).max()
            qf_log_probs = F.log_softmax(self.qf(batch.critic_obs, batch.actions).float(), dim=-1)
            qf_losses = -(target_dist * qf_log_probs).sum(-1)  # (num_q, B)
            # Weighted mean over the batch (divided by B, not by sum(valid), so it stays linear in the
            # samples and averaging gradients over ranks equals the full-batch gradient); summed over critics.
            qf_loss = (qf_losses * batch.valid).mean(-1).sum()
            if self.cfg.autotune:
                alpha_loss = -(self.log_alpha.exp() * (next_log_probs.float() + self.target_entropy)).mean()
            else:
                alpha_loss = torch.zeros((), device=qf_loss.device)
        self._scaled(qf_loss + alpha_loss).backward()  # type: ignore[no-untyped-call]
        return qf_loss.detach(), alpha_loss.detach(), qf_max.float()

    def _scaled(self, loss: Tensor) -> Tensor:
        return self.scaler.scale(loss) if self.scaler.is_enabled() else loss

    def _optimizer_step(
        self, optimizers: Sequence[torch.optim.Optimizer], clip_params: Iterator[Tensor]
    ) -> None:
        """Clip (when configured) and step; through the GradScaler only when fp16 loss scaling is on."""
        scaling = self.scaler.is_enabled()
        if scaling:
            for optimizer in optimizers:
                self.scaler.unscale_(optimizer)
        if self.cfg.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(clip_params, self.cfg.max_grad_norm)
        for optimizer in optimizers:
            if scaling:
                self.scaler.step(optimizer)
            else:
                optimizer.step()
        if scaling:
            self.scaler.update()

    def _critic_apply(self) -> None:
        """Optimizer steps of the critics and alpha, then the soft target update."""
        optimizers = [self.critic_optimizer] + ([self.alpha_optimizer] if self.cfg.autotune else [])
        self._optimizer_step(optimizers, self.qf.parameters())
        with torch.no_grad():
            targets: list[Tensor] = list(self.qf_target.parameters())
            online: list[Tensor] = list(self.qf.parameters())
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
        all_reduce_grads(self._critic_params(), self.process_group)  # critics and log_alpha together
        self._critic_apply()
        return metrics

    def _actor_backward(self, batch: Batch, noise: Tensor) -> tuple[Tensor, Tensor]:
        """Actor loss and its gradient; returns detached (actor_loss, policy_entropy)."""
        self.actor_optimizer.zero_grad(set_to_none=True)
        with self._autocast():
            actions, log_probs, _ = self.actor.sample(batch.obs, noise)
            # Critic weights are detached: only the actor's parameters get gradients.
            q_probs = F.softmax(self.qf(batch.critic_obs, actions, detach_params=True).float(), dim=-1)
            qf_value = self.qf.expected_value(q_probs).mean(0)  # mean over critics, (B,)
            alpha = self.log_alpha.detach().exp()
            actor_loss = (alpha * log_probs.float() - qf_value).mean()
        self._scaled(actor_loss).backward()  # type: ignore[no-untyped-call]
        return actor_loss.detach(), -log_probs.detach().float().mean()

    def _actor_apply(self) -> None:
        self._optimizer_step([self.actor_optimizer], self.actor.parameters())

    def _actor_step(self, batch: Batch, noise: Tensor) -> tuple[Tensor, Tensor]:
        metrics = self._actor_backward(batch, noise)
        self._actor_apply()
        return metrics

    def _actor_step_in_halves(
        self, backward: Callable[..., tuple[Tensor, Tensor]], batch: Batch, noise: Tensor
    ) -> tuple[Tensor, Tensor]:
        """``backward`` (compiled or not), the gradients averaged over ranks, the optimizer step."""
        metrics = backward(batch, noise)
        all_reduce_grads(self.actor.parameters(), self.process_group)
        self._actor_apply()
        return metrics

    # ------------------------------------------------------------------ driving the steps

    def _run(self, fn: Callable[..., Any], *args: Tensor | Batch) -> tuple[Tensor, ...]:
        if self._step_graphs:
            return tuple(fn(*args))  # StepGraph returns clones of its graph's outputs
        if self._cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()  # type: ignore[no-untyped-call]
            # Outputs live in the CUDA-graph pool and are overwritten by the next replay.
            return tuple(t.clone() for t in fn(*args))
        return tuple(fn(*args))

    def prepare(self, batch: Batch) -> Batch:
        """Update the normalizers with the batch's observations (merged over ranks) and normalise it."""
        batch = batch.to(self.device, non_blocking=True)
        self._accumulate_fn(batch.obs, batch.critic_obs)
        sync_normalizer_stats(self.normalizers, self.process_group)
        obs, next_obs, critic_obs, next_critic_obs = self._normalize_fn(
            batch.obs, batch.next_obs, batch.critic_obs, batch.next_critic_obs
        )
        return batch._replace(
            obs=obs, next_obs=next_obs, critic_obs=critic_obs, next_critic_obs=next_critic_obs
        )

    def _accumulate_obs(self, obs: Tensor, critic_obs: Tensor) -> None:
        self.obs_normalizer.accumulate(obs)
        if self.critic_obs_normalizer is not self.obs_normalizer:
            self.critic_obs_normalizer.accumulate(critic_obs)

    def _normalize_obs(
        self, obs: Tensor, next_obs: Tensor, critic_obs: Tensor, next_critic_obs: Tensor
    ) -> Observations:
        actor, critic = self.obs_normalizer, self.critic_obs_normalizer
        obs, next_obs = actor.normalize(obs), actor.normalize(next_obs)
        if self.dims.critic_obs_is_obs:  # the batch's critic fields are its obs fields
            return obs, next_obs, obs, next_obs
        return obs, next_obs, critic.normalize(critic_obs), critic.normalize(next_critic_obs)

    def update(self, num_updates: int) -> dict[str, Tensor]:
        """Run ``num_updates`` critic updates (and the due actor updates) on one sampled batch.

        Samples ``batch_per_env * num_updates`` transitions per env ONCE, normalises them once and
        slices them into ``num_updates`` minibatches. Never synchronises with the host.

        Returns:
            Detached metric tensors: ``qf_loss``, ``alpha_loss`` (means over this call's critic
            updates), ``qf_max`` (max target value), ``actor_loss``, ``policy_entropy`` (means over
            this call's actor updates, else the latest), ``alpha``.
        """
        return self.update_on_batch(self.buffer.sample(self.batch_per_env * num_updates), num_updates)

    def update_on_batch(
        self, batch: Batch, num_updates: int, noise: UpdateNoise | None = None
    ) -> dict[str, Tensor]:
        """``update`` on a given (unnormalised) batch, optionally with given policy noise (for tests)."""
        rows = batch.obs.shape[0]
        if num_updates < 1 or rows % num_updates:
            raise ConfigError(
                f"a batch of {rows} rows cannot be split into num_updates={num_updates} minibatches"
            )
        size = rows // num_updates
        batch = self.prepare(batch)
        if noise is None:
            shape = (rows, self.dims.act_dim)
            noise = UpdateNoise(
                torch.randn(shape, device=self.device), torch.randn(shape, device=self.device)
            )
        critic_metrics, actor_metrics = [], []
        for i in range(num_updates):
            minibatch = batch.narrow(i * size, size)
            critic_metrics.append(
                self._run(self._critic_fn, minibatch, noise.next_actions.narrow(0, i * size, size))
            )
            # holosoma runs the actor when `i % policy_frequency == 1`; we count i over all calls.
            if self.update_idx % self.cfg.policy_frequency == 1 % self.cfg.policy_frequency:
                actor_metrics.append(
                    self._run(self._actor_fn, minibatch, noise.actions.narrow(0, i * size, size))
                )
            self.update_idx += 1
        qf_loss, alpha_loss, qf_max = (torch.stack(m) for m in zip(*critic_metrics, strict=True))
        if actor_metrics:
            self._last_actor_metrics = tuple(  # type: ignore[assignment]
                torch.stack(m).mean() for m in zip(*actor_metrics, strict=True)
            )
        actor_loss, policy_entropy = self._last_actor_metrics
        return {
            "qf_loss": qf_loss.mean(),
            "actor_loss": actor_loss,
            "alpha": self.log_alpha.detach().exp(),
            "alpha_loss": alpha_loss.mean(),
            "policy_entropy": policy_entropy,
            "qf_max": qf_max.max(),
        }

    # ------------------------------------------------------------------ acting and weights

    @torch.no_grad()
    def act(self, obs: Tensor, *, deterministic: bool = False) -> Tensor:
        """Actions for raw observations ``(B, obs_dim)`` (normalizer not updated)."""
        obs = obs.to(self.device, dtype=torch.float32)
        action: Tensor = self.actor(self.obs_normalizer(obs, update=False), deterministic=deterministic)
        return action

    def actor_param_numel(self) -> int:
        """Length of the flat actor parameter vector."""
        return numel_of(list(self.actor.parameters()))

    def flatten_actor_params(self, out: Tensor | None = None) -> Tensor:
        """Actor parameters as one contiguous float32 vector (written into ``out`` when given)."""
        return flatten_into(list(self.actor.parameters()), out)

    def load_actor_params(self, flat: Tensor) -> None:
        """Load a vector made by ``flatten_actor_params``."""
        unflatten_into(list(self.actor.parameters()), flat)

    def policy_extras(self) -> dict[str, Tensor]:
        """What a policy needs besides the actor weights: the obs normalizer's float32 statistics."""
        n = self.obs_normalizer
        return {"obs_mean": n.mean.clone(), "obs_std": n.std.clone(), "obs_count": n.count.float().reshape(1)}

    # ------------------------------------------------------------------ state

    def state_dict(self, include_buffer: bool = False) -> dict[str, Any]:
        """The whole training state (see ``save_checkpoint``); replay data only with ``include_buffer``."""
        return {
            "actor": self.actor.state_dict(),
            "qf": self.qf.state_dict(),
            "qf_target": self.qf_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "obs_normalizer": self.obs_normalizer.state_dict(),
            "critic_obs_normalizer": self.critic_obs_normalizer.state_dict(),
            "update_idx": self.update_idx,
            "last_actor_metrics": [t.clone() for t in self._last_actor_metrics],
            "buffer": self.buffer.state_dict(include_data=include_buffer),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict`` (shapes must already be checked; see ``load_checkpoint``)."""
        self._reset_step_graphs()  # first: even a load that fails half-way leaves no stale graph
        self.actor.load_state_dict(state["actor"])
        self.qf.load_state_dict(state["qf"])
        self.qf_target.load_state_dict(state["qf_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        for optimizer in (self.actor_optimizer, self.critic_optimizer, self.alpha_optimizer):
            for group in optimizer.param_groups:  # a checkpoint carries its writer's settings
                group["capturable"] = self._step_graphs
                group["fused"] = self.device.type == "cuda"
        if state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        self.obs_normalizer.load_state_dict(state["obs_normalizer"])
        if self.critic_obs_normalizer is not self.obs_normalizer:  # a shared one is saved twice
            self.critic_obs_normalizer.load_state_dict(state["critic_obs_normalizer"])
        self.update_idx = int(state["update_idx"])
        a, b = (t.to(self.device) for t in state["last_actor_metrics"])
        self._last_actor_metrics = (a, b)
        self.buffer.load_state_dict(state["buffer"])


def sync_normalizers(agent: FastSACAgent, group: ProcessGroup | None = None) -> None:
    """Merge both normalizers' pending statistics over the ranks of ``group`` (one float64 all-reduce)."""
    sync_normalizer_stats(agent.normalizers, group)
