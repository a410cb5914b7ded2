"""FastSAC hyper-parameters: one frozen dataclass with the public recipe's defaults.

Defaults follow the holosoma FastSAC recipe (``fast_sac`` config values; see
``wiki/decisions.md``). Tasks override what they need (the MuJoCo tasks use ``gamma=0.99``
and their own value ranges).

A :class:`FastSACConfig` checks its own values when it is built (one rule per field, below, and the
two bounds that must be ordered): every layer above (the agent, the engine, the app) trusts a record
that exists. The one rule that needs the env count, a batch split evenly over every env, is
:func:`batch_per_env`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from .exceptions import ConfigError

_SUPPORT_FIELDS = ("reward_normalization", "normalized_v_max", "v_min", "v_max")
"""The fields :attr:`FastSACConfig.support_settings` reads."""

__all__ = ["FastSACConfig", "batch_choices", "batch_per_env"]


def _number(value: Any) -> bool:
    """A finite int or float (not a bool): an infinite or NaN setting would reach the networks' math."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_Rule = tuple[Callable[[Any], bool], str]

_RULES: dict[str, _Rule] = {
    "actor_hidden_dim": (lambda v: _count(v) and v >= 4, "use at least 4 (the layers are h, h/2, h/4 wide)"),
    "critic_hidden_dim": (lambda v: _count(v) and v >= 4, "use at least 4 (the layers are h, h/2, h/4 wide)"),
    "num_q_networks": (lambda v: _count(v) and v >= 1, "use at least 1 critic"),
    "num_atoms": (lambda v: _count(v) and v >= 2, "use at least 2 atoms"),
    "v_min": (_number, "use a finite bound of the critics' support"),
    "v_max": (_number, "use a finite bound of the critics' support"),
    "log_std_min": (_number, "use a finite bound of the policy's log std"),
    "log_std_max": (_number, "use a finite bound of the policy's log std"),
    "target_entropy_ratio": (_number, "use a finite ratio"),
    "normalizer_eps": (
        lambda v: _number(v) and v > 0,
        "use a positive epsilon (added to the observations' std)",
    ),
    "actor_lr": (lambda v: _number(v) and v >= 0, "use 0 or a positive learning rate"),
    "critic_lr": (lambda v: _number(v) and v >= 0, "use 0 or a positive learning rate"),
    "alpha_lr": (lambda v: _number(v) and v >= 0, "use 0 or a positive learning rate"),
    "weight_decay": (lambda v: _number(v) and v >= 0, "use 0 or a positive weight decay"),
    "adam_beta1": (lambda v: _number(v) and 0 <= v < 1, "use a value in [0, 1)"),
    "adam_beta2": (lambda v: _number(v) and 0 <= v < 1, "use a value in [0, 1)"),
    "max_grad_norm": (lambda v: _number(v) and v >= 0, "use 0 (no clipping) or a positive norm"),
    "gamma": (lambda v: _number(v) and 0 < v <= 1, "use a discount in (0, 1]"),
    "tau": (lambda v: _number(v) and 0 < v <= 1, "use a soft-update rate in (0, 1]"),
    "alpha_init": (lambda v: _number(v) and v > 0, "use a positive temperature"),
    "buffer_size": (lambda v: _count(v) and v >= 1, "use a positive per-env capacity"),
    "batch_size": (lambda v: _count(v) and v >= 1, "use a positive batch size"),
    "num_steps": (lambda v: _count(v) and v >= 1, "use n >= 1 for the n-step return"),
    "learning_starts": (lambda v: _count(v) and v >= 0, "use 0 or more iterations"),
    "num_updates": (lambda v: _count(v) and v >= 1, "use at least 1 update per iteration"),
    "policy_frequency": (lambda v: _count(v) and v >= 1, "use at least 1 (critic updates per actor update)"),
    "normalized_v_max": (lambda v: _number(v) and v > 0, "use a positive bound of the normalised support"),
    "cudagraph_scope": (lambda v: v in ("regions", "step"), "use regions or step"),
    "amp_dtype": (lambda v: v in ("bf16", "fp16"), "use bf16 or fp16"),
}
"""The value rule of each checked field: (accepts, the fix the error names)."""


def batch_choices(batch_size: int, num_envs: int) -> tuple[int, ...]:
    """The valid batch sizes nearest ``batch_size`` for ``num_envs`` envs, lower first.

    A valid batch is a positive multiple of ``num_envs``: the one at or below ``batch_size`` (when
    positive) and the next one above it.
    """
    lower = batch_size // num_envs * num_envs
    return tuple(value for value in (lower, lower + num_envs) if value > 0)


def batch_per_env(batch_size: int, num_envs: int) -> int:
    """Samples each env gives to one update: ``batch_size / num_envs``.

    Every env gives the same number of samples, so the batch must split evenly over them.

    Args:
        batch_size: ``FastSACConfig.batch_size``, the global batch of one update.
        num_envs: The envs that feed the update: every env of the run (every learner rank's).

    Raises:
        ConfigError: ``batch_size`` is not a multiple of ``num_envs`` (its setting is ``batch_size``;
            the fix names the nearest valid sizes).
    """
    if batch_size % num_envs:
        choices = " or ".join(str(value) for value in batch_choices(batch_size, num_envs))
        fix = (
            f"it is not divisible by the run's {num_envs} envs (each env gives every update "
            f"batch_size / {num_envs} samples); use {choices}"
        )
        raise ConfigError.of_setting("batch_size", batch_size, fix)
    return batch_size // num_envs


@dataclass(frozen=True, kw_only=True)
class FastSACConfig:
    """Every FastSAC hyper-parameter, with the holosoma recipe's defaults."""

    # Networks.
    actor_hidden_dim: int = 512
    """Width of the actor's first hidden layer; the MLP is h -> h/2 -> h/4 with LayerNorm + SiLU."""
    critic_hidden_dim: int = 768
    """Width of each critic's first hidden layer; h -> h/2 -> h/4 with LayerNorm + SiLU."""
    num_q_networks: int = 2
    """Number of distributional critics, each trained on the projection of its own target."""
    num_atoms: int = 101
    """C51 atoms per critic."""
    v_min: float = -20.0
    """Lowest return the C51 support represents (unused with ``reward_normalization``)."""
    v_max: float = 20.0
    """Highest return the C51 support represents (unused with ``reward_normalization``)."""
    use_layer_norm: bool = True
    """LayerNorm after every hidden linear layer (actor and critics)."""
    log_std_min: float = -5.0
    """Lower end of the actor's log standard deviation (tanh-mapped)."""
    log_std_max: float = 0.0
    """Upper end of the actor's log standard deviation (tanh-mapped)."""

    # Optimisation.
    actor_lr: float = 3e-4
    """AdamW learning rate of the actor."""
    critic_lr: float = 3e-4
    """AdamW learning rate of the critics."""
    alpha_lr: float = 3e-4
    """Adam learning rate of log(alpha) (no weight decay)."""
    weight_decay: float = 1e-3
    """AdamW weight decay of actor and critics."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.95
    """AdamW beta2."""
    max_grad_norm: float = 0.0
    """Gradient-norm clip; 0 disables clipping."""
    gamma: float = 0.97
    """Discount factor."""
    tau: float = 0.125
    """Soft target update rate (target <- target + tau * (online - target)), fused into the critic step."""

    # Entropy.
    alpha_init: float = 0.001
    """Initial entropy temperature."""
    autotune: bool = True
    """Learn alpha towards the target entropy."""
    target_entropy_ratio: float = 0.0
    """target_entropy = -act_dim * target_entropy_ratio."""

    # Data.
    buffer_size: int = 1024
    """Replay capacity per env (transitions); total capacity is buffer_size * num_envs."""
    batch_size: int = 8192
    """Global batch per update, split evenly across envs (and across learners)."""
    num_steps: int = 1
    """n of the n-step return."""
    learning_starts: int = 10
    """Collector iterations (full env batches) of random actions before learning starts."""
    num_updates: int = 8
    """Critic updates per collector iteration (the update-to-data ratio)."""
    policy_frequency: int = 4
    """One actor (and alpha) update every this many critic updates."""
    obs_normalization: bool = True
    """Normalise actor and critic observations with running statistics."""
    normalizer_eps: float = 1e-2
    """Epsilon added to the running standard deviation."""
    reward_normalization: bool = False
    """Scale the rewards by a running estimate of the spread of the discounted return (Note [reward
    scale] in ``_reward_scale``), so that the critic's support no longer depends on the env's reward
    scale: it is ``±normalized_v_max`` and ``v_min``/``v_max`` are unused. The replay keeps raw rewards;
    sampled n-step rewards are scaled by the scale of the moment."""
    normalized_v_max: float = 10.0
    """With ``reward_normalization``: the critics' support is ``[-normalized_v_max, normalized_v_max]``,
    and the scale keeps every discounted return seen so far within half of it (``return_bound``)."""

    # Execution.
    compile: bool = True
    """torch.compile the update steps on CUDA (ignored on CPU, where updates run eagerly). Without it,
    ``cudagraph_scope=step`` still captures the eager step; for plain eager steps also set
    ``cudagraphs=False``."""
    compile_in_background: bool = False
    """With ``compile`` on CUDA and one learner rank: update with the eager steps (each captured whole
    with ``cudagraph_scope=step``) at once while the compiled steps (and their CUDA graphs) are built
    in a background thread, then switch to them between two updates (Note [Compile in the
    background]). Off: the first update waits for the compile. Several ranks, fp16 loss scaling and
    ``cudagraph_scope=regions`` always compile first. Only in a process that ends with ``os._exit`` (a
    worker: the asynchronous learner), hence off here; the trainer's asynchronous learner turns it on
    (wiki/benchmarks.md, "Compile in the background")."""
    compile_warmer: bool = True
    """With ``compile_in_background``: compile the same steps first in a separate process into the
    on-disk compile cache, started with the agent, and build the background compile from that cache
    once it is done (Note [compile warmer]): the compile shares no GIL with the training thread and
    starts before the first update. Needs the compile cache (``FASTSAC_COMPILE_CACHE`` not ``off``)."""
    compile_optimizer: bool = True
    """With ``compile`` on CUDA: compile each update step whole, optimizer steps included. False:
    compile only the losses and their backward, and run the optimizer steps (fused Adam) and the
    target update eagerly after them, as several ranks do (captured in the same whole-step graph with
    ``cudagraph_scope=step``): dynamo traces no optimizer, so the first compile is shorter
    (wiki/benchmarks.md, "Learner": ``learner_updates.py --modes step step-halves``). Needs
    ``cudagraph_scope=step`` (region graphs need whole compiled steps); compiles first
    (``compile_in_background`` needs whole steps)."""
    cudagraphs: bool = True
    """Replay the update steps as CUDA graphs on CUDA (no fp16 loss scaling; one rank, or several
    with ``capture_all_reduce``), as ``cudagraph_scope`` says."""
    cudagraph_scope: Literal["regions", "step"] = "step"
    """What one CUDA graph covers: ``regions``, torch.compile's 'reduce-overhead' graphs, one per
    compiled region of a step (``compile`` required); ``step``, the whole step (forward, backward,
    optimizer step) captured as one graph around the step, compiled or not (Note [Whole-step graphs]).
    ``step`` removes the host work between regions, which leaves the update GPU-bound
    (wiki/benchmarks.md, Learner), hence the default."""
    capture_all_reduce: bool = False
    """Several learner ranks on CUDA (NCCL) with ``cudagraph_scope=step``: capture each step whole,
    its gradient all-reduce included, as one rank's step is (Note [Ranks in step graphs]). Off, a
    step of several ranks runs without CUDA graphs, every kernel launched from the host
    (wiki/benchmarks.md, "Two learners"). Off by default until it has run on GPUs."""
    amp: bool = True
    """Autocast the update steps on CUDA."""
    amp_dtype: Literal["bf16", "fp16"] = "bf16"
    """Autocast dtype."""

    def __post_init__(self) -> None:
        """Check every field against its rule, then the rules between fields.

        ``v_min < v_max``, ``compile_optimizer`` against the graph scope, ``log_std_min < log_std_max``.

        Raises:
            ConfigError: The first invalid field, with its name, the value seen and the fix.
        """
        for f in fields(self):
            rule = _RULES.get(f.name)
            value = getattr(self, f.name)
            if rule is not None and not rule[0](value):
                raise ConfigError.of_setting(f.name, value, rule[1])
        # With reward normalisation the support is ±normalized_v_max and v_min/v_max go unused.
        if not self.reward_normalization and not self.v_min < self.v_max:
            raise ConfigError.of_setting("v_min", self.v_min, f"use a value below v_max={self.v_max}")
        if not self.compile_optimizer and self.cudagraphs and self.cudagraph_scope == "regions":
            fix = "region graphs need whole compiled steps; use true, or cudagraph_scope=step"
            raise ConfigError.of_setting("compile_optimizer", self.compile_optimizer, fix)
        if not self.log_std_min < self.log_std_max:
            fix = f"use a value below log_std_max={self.log_std_max}"
            raise ConfigError.of_setting("log_std_min", self.log_std_min, fix)

    @property
    def value_support(self) -> tuple[float, float]:
        """The critics' C51 support: ``(v_min, v_max)``; ``±normalized_v_max`` with reward normalisation."""
        if self.reward_normalization:
            return -self.normalized_v_max, self.normalized_v_max
        return self.v_min, self.v_max

    @property
    def support_settings(self) -> dict[str, Any]:
        """The settings that define what the critics' outputs mean (a resume must keep them).

        Reward normalisation and the bounds of :attr:`value_support` it uses: a critic trained under
        other ones would read its atoms as other values.
        """
        if self.reward_normalization:
            return {"reward_normalization": True, "normalized_v_max": self.normalized_v_max}
        return {"reward_normalization": False, "v_min": self.v_min, "v_max": self.v_max}

    @classmethod
    def support_settings_of(cls, saved: Mapping[str, Any]) -> dict[str, Any]:
        """:attr:`support_settings` of a saved config (a checkpoint's ``config`` dict).

        Only the support's own fields are read; one the dict lacks (a checkpoint of a trainer that
        did not have it: reward normalisation came later) takes the default it had then, this class's.

        Raises:
            ConfigError: The saved support is invalid (its bounds out of order).
        """
        return cls(**{key: saved[key] for key in _SUPPORT_FIELDS if key in saved}).support_settings

    @property
    def return_bound(self) -> float:
        """With reward normalisation: the bound on every scaled |return| seen so far (Note [reward scale])."""
        return self.normalized_v_max / 2
