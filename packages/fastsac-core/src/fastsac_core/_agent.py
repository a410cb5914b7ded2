"""The FastSAC learner of one rank: model, normalizers and replay buffer, driven one ``update`` at a time.

Where each part lives: the losses in ``_losses`` (the math, top to bottom), the networks and optimizers
in ``_model``, the critic and actor steps in ``_steps``, how they run (eager, compiled, CUDA graphs)
in ``_execution`` (``ExecutionPolicy``, chosen once here), autocast and loss scaling in ``_precision``,
the training state a checkpoint holds in ``_state``. The agent samples its replay buffer (given to it),
prepares the batch (normalizer statistics merged over ranks, normalisation) and runs the steps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

import torch
from torch import Tensor

from . import _state
from ._background_compile import BackgroundCompile
from ._compile_cache import use_compile_cache
from ._compile_warmer import CompileWarmer, WarmerJob, warmer_refusal
from ._distributed import ProcessGroup, sync_normalizer_stats, sync_reward_scale
from ._execution import ExecutionPolicy
from ._flat import flatten_into, numel_of, unflatten_into
from ._model import SACModel, build_actor
from ._normalizer import EmpiricalNormalizer
from ._precision import Precision
from ._replay import Batch, ReplayBuffer
from ._schema import policy_extras
from ._step_graph import StepGraph
from ._steps import UpdateSteps
from .config import FastSACConfig, batch_per_env
from .env import EnvDims
from .exceptions import ConfigError

__all__ = ["FastSACAgent", "UpdateNoise", "build_actor", "sync_normalizers"]

log = logging.getLogger(__name__)

Observations = tuple[Tensor, Tensor, Tensor, Tensor]
"""Normalised ``(obs, next_obs, critic_obs, next_critic_obs)``."""


class UpdateNoise(NamedTuple):
    """Standard-normal noise of one ``update`` call (rows match the sampled batch)."""

    next_actions: Tensor
    """(rows, act_dim) noise of a' ~ pi(s') in the critic steps."""
    actions: Tensor
    """(rows, act_dim) noise of a ~ pi(s) in the actor steps."""


def _validate(dims: EnvDims, cfg: FastSACConfig, buffer: ReplayBuffer, world_size: int) -> int:
    """Check that dims and buffer fit ``cfg``; return the per-env batch of one update on this rank.

    ``cfg`` checked its own ranges when it was built; the batch must split evenly over every env of
    the run (this rank's ``buffer.num_envs`` on each of ``world_size`` ranks).
    """
    if len(dims.action_low) != dims.act_dim or len(dims.action_high) != dims.act_dim:
        raise ConfigError(f"action bounds have {len(dims.action_low)} entries; act_dim={dims.act_dim}")
    scale = buffer.reward_scale
    bound = cfg.return_bound if cfg.reward_normalization else None
    if (buffer.n_steps, buffer.gamma, scale.return_bound if scale.enabled else None) != (
        cfg.num_steps,
        cfg.gamma,
        bound,
    ):
        raise ConfigError(
            f"the replay buffer has n_steps={buffer.n_steps}, gamma={buffer.gamma}, reward scale "
            f"{'on' if scale.enabled else 'off'}; the config has num_steps={cfg.num_steps}, "
            f"gamma={cfg.gamma}, reward_normalization={cfg.reward_normalization}; build it with "
            "ReplayBuffer.of(dims, cfg, ...)"
        )
    return batch_per_env(cfg.batch_size, world_size * buffer.num_envs)


class FastSACAgent:
    """FastSAC learner state and updates for one rank.

    Args:
        dims: Task dimensions and action bounds.
        cfg: Hyper-parameters.
        device: Learner device (networks and normalizers).
        buffer: This rank's replay buffer (``ReplayBuffer.of(dims, cfg, num_envs)``: any device, one
            block per collector under ragged ingest); the agent samples it and checkpoints it.
        world_size: Learner ranks (gradients are averaged over them).
        process_group: torch.distributed group of the learners (default group when ``None``).
        execution: How the steps run; None: ``ExecutionPolicy.choose(cfg, device, world_size)``.
        compile_context: Makes the context a background compile builds in (Note [Compile in the
            background]); None: none.
        compile_cpus: CPUs a compile warmer runs on (Note [compile warmer]); None: this process's.
    """

    def __init__(
        self,
        dims: EnvDims,
        cfg: FastSACConfig,
        device: torch.device | str,
        *,
        buffer: ReplayBuffer,
        world_size: int = 1,
        process_group: ProcessGroup | None = None,
        execution: ExecutionPolicy | None = None,
        compile_context: Callable[[], AbstractContextManager[object]] | None = None,
        compile_cpus: Collection[int] | None = None,
    ) -> None:
        self.dims, self.cfg = dims, cfg
        self.device = torch.device(device)
        self.world_size, self.process_group = world_size, process_group
        self.batch_per_env = _validate(dims, cfg, buffer, world_size)
        self.buffer = buffer
        self.execution = execution or ExecutionPolicy.choose(cfg, self.device, world_size)
        """How the steps and the batch preparation run (chosen once)."""
        step_graphs = self.execution.graphs == "step"
        self.update_idx = 0
        """Critic updates done so far (persistent across calls; gates the actor step)."""

        # Captured optimizer steps keep their step counts on the device (Note [Whole-step graphs]).
        self.model = SACModel(
            dims, cfg, self.device, world_size=world_size, process_group=process_group, capturable=step_graphs
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
        self.reward_scale = buffer.reward_scale
        """The running reward scale its buffer keeps (Note [reward scale]); 1 without reward normalisation."""

        e = self.execution
        self.precision = Precision(e.amp_dtype, loss_scaling=e.loss_scaling, cache_casts=not step_graphs)
        # With a background compile: the interim steps until it switches (Note [Compile in the background]).
        first = e.interim() if e.background else e
        self.steps = UpdateSteps(
            self.model, cfg, self.precision, first, self.device, process_group, may_capture=self._may_capture
        )
        self._accumulate_fn, self._normalize_fn = self._preparation(first.compile_prepare)
        zero = torch.zeros((), device=self.device)
        self.last_actor_metrics = (zero, zero.clone())
        """The latest call's actor metrics, reported by calls that ran no actor step."""
        self.compiled_at: int | None = 0 if e.compile_steps and not e.background else None
        """The update the compiled steps took over at (0: from the start); None while the steps are eager
        (a background compile still running or failed, or a policy without ``compile_steps``)."""
        # The warmer before the build's set-up (its deep copy, inductor's import): the warmer's compile
        # overlaps that and all that follows (Note [compile warmer]).
        warmer = self._start_warmer(compile_cpus)
        self._background: BackgroundCompile | None = None
        self._closed: BackgroundCompile | None = None
        """A closed build (``close``), whose thread may still be ending."""
        try:
            if e.background:
                self._background = BackgroundCompile(self, cfg.num_updates, compile_context, warmer)
            self._maybe_start_compile()
        except BaseException:  # an agent that never came to be leaves no warmer running
            if self._background is not None:
                self._background.close()
            elif warmer is not None:
                warmer.close()
            raise

    def _start_warmer(self, cpus: Collection[int] | None) -> CompileWarmer | None:
        """A compile warmer for this agent's background compile, if one can help (Note [compile warmer])."""
        refusal = warmer_refusal(self.cfg, self.execution)
        if refusal is not None:
            if self.execution.background:
                log.info("no compile warmer: %s", refusal)
            return None
        device = self.device
        if device.type == "cuda" and device.index is None:  # the GPU "cuda" means here, not in the warmer
            device = torch.device("cuda", torch.cuda.current_device())
        job = WarmerJob(
            dims=self.dims, cfg=self.cfg, execution=self.execution, device=str(device),
            num_envs=self.buffer.num_envs, world_size=self.world_size, updates=self.cfg.num_updates,
            cpus=tuple(sorted(cpus)) if cpus else None,
        )  # fmt: skip
        return CompileWarmer.start(job)

    def _may_capture(self) -> bool:
        """Whether a step graph may capture now: not while a compile thread runs (its Note)."""
        return not any(build is not None and build.running for build in (self._background, self._closed))

    def _maybe_start_compile(self) -> None:
        """Start the background compile once the interim steps hold no capture still to come.

        A capture due later (new shapes, a state load) waits for the compile's end (``_may_capture``).
        """
        build = self._background
        if build is None or build.started:
            return
        pending = [fn for fn in (self.steps.critic, self.steps.actor) if isinstance(fn, StepGraph)]
        if all(fn.captured for fn in pending):
            build.start()

    @property
    def compiled(self) -> bool:
        """Whether the updates run the compiled steps now."""
        return self.compiled_at is not None

    def _preparation(
        self, compiled: bool
    ) -> tuple[Callable[[Tensor, Tensor], None], Callable[..., Observations]]:
        """The batch preparation's two halves, compiled or not."""
        accumulate: Callable[[Tensor, Tensor], None] = self._accumulate_obs
        normalize: Callable[[Tensor, Tensor, Tensor, Tensor], Observations] = self._normalize_obs
        if compiled:
            use_compile_cache()  # before the first compile (Note [compile cache])
            # Eagerly, the normalizers' statistics and the normalisation are a dozen memory-bound passes
            # over the sampled rows (float64 temporaries included); compiled, each half fuses into a few
            # kernels. ``fullgraph``: a graph break raises instead of silently running pieces eagerly.
            backend = self.execution.backend
            accumulate = torch.compile(accumulate, fullgraph=True, backend=backend)
            normalize = torch.compile(normalize, fullgraph=True, backend=backend)
        return accumulate, normalize

    def _maybe_switch(self) -> None:
        """At an update boundary: switch to the background compile's steps once they are built.

        A failed build is said once (one warning) and the interim steps stay (Note [Compile in the
        background]).
        """
        build = self._background
        if build is None or not build.done():
            return
        self._background = None
        if build.steps is None:
            reason = build.error if build.error is not None else "stopped"
            log.warning(
                "compiling the update step in the background failed after %.1f s (%s: %s); "
                "training continues with the eager steps (set algo.agent.compile_in_background=false "
                "to compile before the first update and see the full error)",
                build.seconds, type(reason).__name__, reason,
            )  # fmt: skip
            return
        build.model.copy_from(self.model)
        self.model, self.steps = build.model, build.steps
        self._accumulate_fn, self._normalize_fn = self._preparation(self.execution.compile_prepare)
        self.compiled_at = self.update_idx
        cache = f" ({build.cache_note})" if build.cache_note else ""
        log.info("compiled update ready after %.1f s%s; switched at update %d",
                 build.seconds, cache, self.update_idx)  # fmt: skip

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop a background compile still running (warmer killed, thread joined: bounded); idempotent.

        Each of the two waits is bounded by about ``timeout_s``. A thread still running after that keeps
        later captures waiting until it ends.
        """
        if self._background is not None:
            self._background.close(timeout_s)
            self._closed, self._background = self._background, None

    # ------------------------------------------------------------------ preparing a batch

    def prepare(self, batch: Batch) -> Batch:
        """Update the normalizers with the batch's observations (merged over ranks) and normalise it.

        With reward normalisation the reward scale's statistics are merged over ranks too, and the
        batch's (raw, n-step) rewards are multiplied by the scale of the moment (Note [reward scale]).
        """
        batch = batch.to(self.device, non_blocking=True)
        self._accumulate_fn(batch.obs, batch.critic_obs)
        sync_normalizer_stats(self.normalizers, self.process_group)
        obs, next_obs, critic_obs, next_critic_obs = self._normalize_fn(
            batch.obs, batch.next_obs, batch.critic_obs, batch.next_critic_obs
        )
        rewards = batch.rewards
        if self.reward_scale.enabled:
            sync_reward_scale(self.reward_scale, self.process_group)
            rewards = rewards * self.reward_scale.scale.to(self.device, non_blocking=True)
        return batch._replace(
            obs=obs,
            next_obs=next_obs,
            critic_obs=critic_obs,
            next_critic_obs=next_critic_obs,
            rewards=rewards,
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

    # ------------------------------------------------------------------ updates

    def update(self, num_updates: int) -> dict[str, Tensor]:
        """Run ``num_updates`` critic updates (and the due actor updates) on one sampled batch.

        Samples ``batch_per_env * num_updates`` transitions per env ONCE, normalises them once and
        slices them into ``num_updates`` minibatches. Never synchronises with the host.

        Returns:
            Detached metric tensors: ``qf_loss``, ``alpha_loss`` (means over this call's critic
            updates), ``qf_max`` (max target value, in scaled units with reward normalisation),
            ``actor_loss``, ``policy_entropy`` (means over this call's actor updates, else the latest),
            ``alpha``, ``reward_scale`` (the factor rewards were multiplied by; 1 without normalisation).
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
        self._maybe_switch()
        batch = self.prepare(batch)
        if noise is None:
            shape = (rows, self.dims.act_dim)
            noise = UpdateNoise(
                torch.randn(shape, device=self.device), torch.randn(shape, device=self.device)
            )
        steps = self.steps
        critic_metrics, actor_metrics = [], []
        for i in range(num_updates):
            minibatch = batch.narrow(i * size, size)
            critic_metrics.append(
                steps.run(steps.critic, minibatch, noise.next_actions.narrow(0, i * size, size))
            )
            # holosoma runs the actor when `i % policy_frequency == 1`; we count i over all calls.
            if self.update_idx % self.cfg.policy_frequency == 1 % self.cfg.policy_frequency:
                actor_metrics.append(
                    steps.run(steps.actor, minibatch, noise.actions.narrow(0, i * size, size))
                )
            self.update_idx += 1
        qf_loss, alpha_loss, qf_max = (torch.stack(m) for m in zip(*critic_metrics, strict=True))
        if actor_metrics:
            self.last_actor_metrics = tuple(  # type: ignore[assignment]
                torch.stack(m).mean() for m in zip(*actor_metrics, strict=True)
            )
        actor_loss, policy_entropy = self.last_actor_metrics
        self._maybe_start_compile()
        return {
            "qf_loss": qf_loss.mean(),
            "actor_loss": actor_loss,
            "alpha": self.model.log_alpha.detach().exp(),
            "alpha_loss": alpha_loss.mean(),
            "policy_entropy": policy_entropy,
            "qf_max": qf_max.max(),
            "reward_scale": self.reward_scale.scale.to(self.device, copy=True),
        }

    # ------------------------------------------------------------------ acting and weights

    @torch.no_grad()
    def act(self, obs: Tensor, *, deterministic: bool = False) -> Tensor:
        """Actions for raw observations ``(B, obs_dim)`` (normalizer not updated)."""
        obs = obs.to(self.device, dtype=torch.float32)
        action: Tensor = self.model.actor(self.obs_normalizer(obs, update=False), deterministic=deterministic)
        return action

    def actor_param_numel(self) -> int:
        """Length of the flat actor parameter vector."""
        return numel_of(list(self.model.actor.parameters()))

    def flatten_actor_params(self, out: Tensor | None = None) -> Tensor:
        """Actor parameters as one contiguous float32 vector (written into ``out`` when given)."""
        return flatten_into(list(self.model.actor.parameters()), out)

    def load_actor_params(self, flat: Tensor) -> None:
        """Load a vector made by ``flatten_actor_params``."""
        unflatten_into(list(self.model.actor.parameters()), flat)

    def policy_extras(self) -> dict[str, Tensor]:
        """What a policy needs besides the actor weights: the obs normalizer's float32 statistics."""
        return policy_extras(self.obs_normalizer)

    # ------------------------------------------------------------------ state

    def state_dict(self, include_buffer: bool = False) -> dict[str, Any]:
        """The whole training state (see ``save_checkpoint``); replay data only with ``include_buffer``."""
        return _state.agent_state(self, include_buffer)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict`` (shapes must already be checked; see ``load_checkpoint``)."""
        _state.load_agent_state(self, state)


def sync_normalizers(agent: FastSACAgent, group: ProcessGroup | None = None) -> None:
    """Merge both normalizers' pending statistics over the ranks of ``group`` (one float64 all-reduce)."""
    sync_normalizer_stats(agent.normalizers, group)
