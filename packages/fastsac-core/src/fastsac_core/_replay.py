"""Replay buffer: per-env circular storage, next obs from the next slot, n-step returns.

# Note [replay layout]
# Storage is slot-major, ``(capacity, num_envs, ...)``: one env step of all envs is one contiguous
# row, so ``extend`` is one copy per field and ``extend_batch`` (k steps) is at most two (split at the
# wrap). All envs are written in lockstep, so one host-side counter ``_written`` (steps ever written)
# locates every slot; the chronological step s lives in slot ``s % capacity``.
#
# next_obs is not stored. Envs auto-reset, so the obs written at step s+1 is the obs that followed
# step s -- except after an episode end, where it is the reset obs of the next episode:
#   * terminated at step s: the transition is complete without a next state (no bootstrap);
#   * truncated (time limit, not terminated) at step s: the true final obs is lost, so a transition
#     whose first step is truncated gets loss weight ``valid = 0`` (see wiki/algorithm.md);
# A transition starting at step s is *complete* once step s+1 is written (it needs that obs).
#
# n-step window from step s: steps s, s+1, ... up to n of them, ending
#   * after a terminated step (its reward included, no bootstrap),
#   * before a truncated step s+i with i > 0 (bootstrap from the real obs of step s+i),
#   * before the newest written step (its next obs does not exist yet).
# rewards = sum_i gamma^i r_{s+i} over the window of m steps, discount = gamma^m, next obs = obs[s+m].
#
# A critic that observes the actor's obs (``critic_obs_dim=None``) gets no storage of its own:
# ``critic_obs`` is ``obs``, written and gathered once, and a sampled batch's critic fields are its
# obs fields (the same tensors).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from .exceptions import ReplayBufferError

__all__ = ["Batch", "ReplayBuffer"]


class Batch(NamedTuple):
    """A batch of n-step transitions (all tensors have the batch as first axis)."""

    obs: Tensor
    """(B, obs_dim) actor observation at the start of the transition."""
    critic_obs: Tensor
    """(B, critic_obs_dim) critic observation at the start."""
    actions: Tensor
    """(B, act_dim) action taken."""
    rewards: Tensor
    """(B,) discounted n-step reward sum."""
    next_obs: Tensor
    """(B, obs_dim) actor observation the return bootstraps from."""
    next_critic_obs: Tensor
    """(B, critic_obs_dim) critic observation the return bootstraps from."""
    bootstrap: Tensor
    """(B,) 1.0 unless the window ended in a terminal state."""
    discount: Tensor
    """(B,) gamma ** effective_n."""
    valid: Tensor
    """(B,) loss weight: 0.0 for transitions cut by a time limit on their first step."""

    def narrow(self, start: int, length: int) -> Batch:
        """Rows ``start .. start+length`` of every field (views, no copy)."""
        return self._map(lambda t: t.narrow(0, start, length))

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """Every field on ``device``."""
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def _map(self, fn: Callable[[Tensor], Tensor]) -> Batch:
        """``fn`` of every field, once per distinct tensor (a critic that observes obs stays obs)."""
        distinct, positions = distinct_tensors(self)
        mapped = [fn(t) for t in distinct]
        return Batch(*(mapped[k] for k in positions))


def distinct_tensors(tensors: Sequence[Tensor]) -> tuple[list[Tensor], list[int]]:
    """The distinct tensors of ``tensors`` (by identity, first-seen order) and each entry's index among them.

    Fields that are one tensor (``Batch.critic_obs is obs`` for a critic that observes obs) are
    handled once, and whatever is rebuilt from the distinct ones keeps them one tensor.
    """
    index: dict[int, int] = {}
    distinct: list[Tensor] = []
    positions: list[int] = []
    for tensor in tensors:
        if id(tensor) not in index:
            index[id(tensor)] = len(distinct)
            distinct.append(tensor)
        positions.append(index[id(tensor)])
    return distinct, positions


class ReplayBuffer:
    """Per-env circular replay storage; see Note [replay layout].

    Args:
        num_envs: Envs written in lockstep per step.
        capacity_per_env: Steps kept per env.
        obs_dim: Actor observation length.
        critic_obs_dim: Critic observation length; None when the critic observes ``obs`` itself.
        act_dim: Action length.
        device: Where the storage (and sampled batches) live: CPU or CUDA.
        n_steps: n of the n-step return.
        gamma: Discount factor.
    """

    def __init__(
        self,
        num_envs: int,
        capacity_per_env: int,
        obs_dim: int,
        critic_obs_dim: int | None,
        act_dim: int,
        device: torch.device | str = "cpu",
        n_steps: int = 1,
        gamma: float = 0.99,
    ) -> None:
        if capacity_per_env < 2:
            raise ReplayBufferError(
                f"capacity_per_env={capacity_per_env} holds no complete transition; use at least 2"
            )
        if n_steps < 1:
            raise ReplayBufferError(f"n_steps={n_steps} must be >= 1")
        self.num_envs = num_envs
        self.capacity = capacity_per_env
        self.n_steps = n_steps
        self.gamma = gamma
        self.device = torch.device(device)
        c, n = capacity_per_env, num_envs

        def floats(*shape: int) -> Tensor:
            # NaN sentinels make any read of an unwritten slot obvious.
            return torch.full((c, n, *shape), float("nan"), device=self.device)

        self.shared_obs = critic_obs_dim is None
        """Whether ``critic_obs`` is ``obs`` (no storage of its own; Note [replay layout])."""
        self.obs = floats(obs_dim)
        self.critic_obs = self.obs if critic_obs_dim is None else floats(critic_obs_dim)
        self.actions = floats(act_dim)
        self.rewards = floats()
        self.dones = torch.zeros(c, n, dtype=torch.bool, device=self.device)
        self.truncations = torch.zeros(c, n, dtype=torch.bool, device=self.device)
        self._written = 0
        self._fields = tuple(
            name
            for name in ("obs", "critic_obs", "actions", "rewards", "dones", "truncations")
            if not (self.shared_obs and name == "critic_obs")
        )
        self._step_powers = torch.arange(n_steps, device=self.device)
        self._discounts = gamma ** self._step_powers.to(torch.float32)
        self._env_index = torch.arange(num_envs, device=self.device)

    # ---------------------------------------------------------------- writing

    def extend(
        self,
        obs: Tensor,
        critic_obs: Tensor | None,
        actions: Tensor,
        rewards: Tensor,
        dones: Tensor,
        truncations: Tensor,
    ) -> None:
        """Write one step of every env (tensors ``(num_envs, ...)``, any device); see ``extend_batch``."""
        self.extend_batch(
            obs.unsqueeze(0),
            None if critic_obs is None else critic_obs.unsqueeze(0),
            actions.unsqueeze(0),
            rewards.unsqueeze(0),
            dones.unsqueeze(0),
            truncations.unsqueeze(0),
        )

    def extend_batch(
        self,
        obs: Tensor,
        critic_obs: Tensor | None,
        actions: Tensor,
        rewards: Tensor,
        dones: Tensor,
        truncations: Tensor,
    ) -> None:
        """Write k consecutive steps, slot-major (tensors ``(k, num_envs, ...)``); equals k ``extend``s.

        A buffer whose critic observes ``obs`` (``shared_obs``) ignores ``critic_obs`` (None, or the
        obs again); any other buffer needs it.
        """
        if self.shared_obs:
            values: tuple[Tensor, ...] = (obs, actions, rewards, dones, truncations)
        elif critic_obs is None:
            raise ReplayBufferError(
                "critic_obs is None, but this buffer stores a critic observation of its own; pass it, or "
                "build the buffer with critic_obs_dim=None for a critic that observes obs"
            )
        else:
            values = (obs, critic_obs, actions, rewards, dones, truncations)
        k = obs.shape[0]
        for name, value in zip(self._fields, values, strict=True):
            expected = (k, *getattr(self, name).shape[1:])
            if tuple(value.shape) != expected:
                raise ReplayBufferError(f"{name} has shape {tuple(value.shape)}; expected {expected}")
        if k > self.capacity:  # only the newest `capacity` steps survive
            values = tuple(v[k - self.capacity :] for v in values)
            self._written += k - self.capacity
            k = self.capacity
        start = self._written % self.capacity
        first = min(k, self.capacity - start)
        for name, value in zip(self._fields, values, strict=True):
            storage: Tensor = getattr(self, name)
            storage[start : start + first].copy_(value[:first], non_blocking=True)
            if first < k:
                storage[: k - first].copy_(value[first:], non_blocking=True)
        self._written += k

    # ---------------------------------------------------------------- reading

    def __len__(self) -> int:
        """Steps stored per env (at most the capacity)."""
        return min(self._written, self.capacity)

    @property
    def num_stored(self) -> int:
        """Transitions stored over all envs."""
        return len(self) * self.num_envs

    @property
    def num_complete(self) -> int:
        """Complete transitions per env (the newest step still waits for its next obs)."""
        return max(len(self) - 1, 0)

    @torch.no_grad()
    def sample(self, batch_per_env: int) -> Batch:
        """Uniformly sample ``batch_per_env`` complete transitions from every env.

        Rows are ordered step-major (row ``j * num_envs + e`` comes from env ``e``), so any contiguous
        slice of ``k * num_envs`` rows holds ``k`` samples of every env.
        """
        if self.num_complete < 1:
            raise ReplayBufferError(
                f"sample() needs a complete transition; the buffer has {len(self)} step(s) per env"
                " (write at least 2 steps first)"
            )
        n, w, cap = self.num_envs, self._written, self.capacity
        oldest = w - len(self)
        step = oldest + torch.randint(0, self.num_complete, (batch_per_env, n), device=self.device)
        env = self._env_index.expand(batch_per_env, n)

        # Window of up to n steps: (batch_per_env, num_envs, n_steps).
        window = step.unsqueeze(-1) + self._step_powers
        slots = window % cap
        env3 = env.unsqueeze(-1).expand_as(slots)
        available = window <= w - 2
        done = self.dones[slots, env3] & available
        cut = self.truncations[slots, env3] & ~self.dones[slots, env3] & available
        stop = done | cut
        stopped_before = (stop.cumsum(-1) - stop.long()) > 0
        later = self._step_powers > 0
        include = available & ~stopped_before & ~(cut & later)

        effective_n = include.sum(-1)
        # where(), not a product: steps outside the window may hold NaN sentinels.
        rewards = torch.where(include, self.rewards[slots, env3] * self._discounts, 0.0).sum(-1)
        terminated = (done & include).any(-1)
        valid = ~cut[..., 0]
        next_slot = (step + effective_n) % cap
        first_slot = step % cap

        def rows(x: Tensor) -> Tensor:
            return x.reshape(batch_per_env * n, *x.shape[2:])

        obs, next_obs = rows(self.obs[first_slot, env]), rows(self.obs[next_slot, env])
        if self.shared_obs:
            critic_obs, next_critic_obs = obs, next_obs
        else:
            critic_obs = rows(self.critic_obs[first_slot, env])
            next_critic_obs = rows(self.critic_obs[next_slot, env])
        return Batch(
            obs=obs,
            critic_obs=critic_obs,
            actions=rows(self.actions[first_slot, env]),
            rewards=rows(rewards),
            next_obs=next_obs,
            next_critic_obs=next_critic_obs,
            bootstrap=rows((~terminated).float()),
            discount=rows(self.gamma ** effective_n.float()),
            valid=rows(valid.float()),
        )

    # ---------------------------------------------------------------- state

    def state_dict(self, include_data: bool = True) -> dict[str, Any]:
        """Counters, and the raw storage (moved to CPU) when ``include_data``."""
        state: dict[str, Any] = {
            "written": self._written,
            "num_envs": self.num_envs,
            "capacity": self.capacity,
        }
        if include_data:
            state["data"] = {name: getattr(self, name).cpu() for name in self._fields}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from ``state_dict``; without data the buffer restarts empty."""
        if (state["num_envs"], state["capacity"]) != (self.num_envs, self.capacity):
            raise ReplayBufferError(
                f"replay state has num_envs={state['num_envs']}, capacity={state['capacity']};"
                f" this buffer has num_envs={self.num_envs}, capacity={self.capacity};"
                " build the buffer with the same sizes"
            )
        if "data" not in state:
            self._written = 0
            return
        missing = [name for name in self._fields if name not in state["data"]]
        if missing:
            raise ReplayBufferError(
                f"the checkpoint's replay has no {missing} (saved by a task whose critic observes obs, so "
                "without critic_obs?); resume with the same task, or without the replay data"
            )
        for name in self._fields:
            target: Tensor = getattr(self, name)
            source: Tensor = state["data"][name]
            if source.shape != target.shape:
                raise ReplayBufferError(
                    f"replay field {name!r} has shape {tuple(source.shape)} in the checkpoint and"
                    f" {tuple(target.shape)} here"
                )
            target.copy_(source)
        self._written = int(state["written"])
