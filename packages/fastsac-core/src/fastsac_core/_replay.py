"""Replay buffer: per-env circular storage, next obs from the next slot, n-step returns.

# Note [replay layout]
# Storage is slot-major, ``(capacity, num_envs, ...)``: one env step of all envs is one contiguous
# row, so ``extend`` is one copy per field and ``extend_batch`` (k steps) is at most two (split at the
# wrap). The envs form ``blocks`` of consecutive envs (one by default; one per collector when a
# learner ingests each collector's steps as they come), and each block has a host-side count of the
# steps ever written to its envs: the chronological step s of an env lives in slot ``s % capacity``.
# ``extend_batch`` writes every env at once (all blocks at the same count); ``extend_block`` writes one
# block's columns at its own count. While the counts differ, ``sample`` draws each env's start step
# from its own block's range (ragged ingest: wiki/async-engine.md, Drain and generations).
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
        blocks: Widths of the env blocks, in env order (they sum to ``num_envs``); None is one block.
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
        blocks: Sequence[int] | None = None,
    ) -> None:
        widths = (num_envs,) if blocks is None else tuple(int(b) for b in blocks)
        if not widths or min(widths) < 1 or sum(widths) != num_envs:
            raise ReplayBufferError(
                f"blocks={list(widths)} for num_envs={num_envs}; give positive widths that sum to num_envs"
            )
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
        self.blocks = widths
        """Widths of the env blocks, in env order."""
        self._block_starts = tuple(sum(widths[:i]) for i in range(len(widths)))
        self._block_written = [0] * len(widths)
        self._env_written: Tensor | None = None  # per env, on the device; rebuilt after a write
        self._block_of_env = torch.arange(len(widths)).repeat_interleave(torch.tensor(widths)).to(self.device)
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
        if len(set(self._block_written)) > 1:
            raise ReplayBufferError(
                f"extend_batch writes every env at one step, but the env blocks hold {self._block_written} "
                "steps; write each block with extend_block"
            )
        values = self._values(obs, critic_obs, actions, rewards, dones, truncations, self.num_envs)
        k = self._write(None, values, self._block_written[0])
        self._block_written = [w + k for w in self._block_written]
        self._env_written = None

    def extend_block(
        self,
        block: int,
        obs: Tensor,
        critic_obs: Tensor | None,
        actions: Tensor,
        rewards: Tensor,
        dones: Tensor,
        truncations: Tensor,
    ) -> None:
        """Write k consecutive steps of env block ``block`` alone (tensors ``(k, width, ...)``).

        The block's envs continue at their own count, whatever the other blocks hold; see
        ``extend_batch`` for ``critic_obs``.
        """
        if not 0 <= block < len(self.blocks):
            raise ReplayBufferError(f"block={block}; this buffer has blocks 0..{len(self.blocks) - 1}")
        width, start = self.blocks[block], self._block_starts[block]
        values = self._values(obs, critic_obs, actions, rewards, dones, truncations, width)
        self._block_written[block] += self._write(
            slice(start, start + width), values, self._block_written[block]
        )
        self._env_written = None

    def _values(
        self, obs: Tensor, critic_obs: Tensor | None, actions: Tensor, rewards: Tensor, dones: Tensor,
        truncations: Tensor, width: int,
    ) -> tuple[Tensor, ...]:  # fmt: skip
        """The stored fields' values, shape-checked for ``width`` envs."""
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
            expected = (k, width, *getattr(self, name).shape[2:])
            if tuple(value.shape) != expected:
                raise ReplayBufferError(f"{name} has shape {tuple(value.shape)}; expected {expected}")
        return values

    def _write(self, columns: slice | None, values: tuple[Tensor, ...], written: int) -> int:
        """Copy k steps into ``columns`` (None: all envs) after ``written`` steps; returns k (all counted)."""
        k = values[0].shape[0]
        skip = max(0, k - self.capacity)  # only the newest `capacity` steps survive
        if skip:
            values = tuple(v[skip:] for v in values)
        kept = k - skip
        start = (written + skip) % self.capacity
        first = min(kept, self.capacity - start)
        for name, value in zip(self._fields, values, strict=True):
            storage: Tensor = getattr(self, name)
            if columns is not None:
                storage = storage[:, columns]
            storage[start : start + first].copy_(value[:first], non_blocking=True)
            if first < kept:
                storage[: kept - first].copy_(value[first:], non_blocking=True)
        return k

    # ---------------------------------------------------------------- reading

    def __len__(self) -> int:
        """Steps stored per env (at most the capacity; the fewest of any block)."""
        return min(self.written, self.capacity)

    @property
    def written(self) -> int:
        """Steps ever written to every env (the fewest of any block)."""
        return min(self._block_written)

    @property
    def block_written(self) -> tuple[int, ...]:
        """Steps ever written to each block's envs."""
        return tuple(self._block_written)

    @property
    def num_stored(self) -> int:
        """Transitions stored over all envs."""
        return sum(min(w, self.capacity) * n for w, n in zip(self._block_written, self.blocks, strict=True))

    @property
    def num_complete(self) -> int:
        """Complete transitions per env, the fewest of any block (the newest step awaits its next obs)."""
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
        n, cap = self.num_envs, self.capacity
        newest: int | Tensor  # steps written, per env where the blocks differ
        if len(set(self._block_written)) == 1:
            newest = self._block_written[0]
            oldest = newest - len(self)
            step = oldest + torch.randint(0, self.num_complete, (batch_per_env, n), device=self.device)
        else:
            written = self._written_per_env()
            stored = written.clamp(max=cap)
            complete = stored - 1
            offset = (
                torch.rand((batch_per_env, n), device=self.device, dtype=torch.float64) * complete
            ).long()
            step = written - stored + torch.minimum(offset, complete - 1)
            newest = written.view(1, n, 1)
        env = self._env_index.expand(batch_per_env, n)

        # Window of up to n steps: (batch_per_env, num_envs, n_steps).
        window = step.unsqueeze(-1) + self._step_powers
        slots = window % cap
        env3 = env.unsqueeze(-1).expand_as(slots)
        available = window <= newest - 2
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

    def _written_per_env(self) -> Tensor:
        """``(num_envs,)`` steps written to each env, on the buffer's device (cached until a write)."""
        if self._env_written is None:
            # Pinned and non-blocking on CUDA: a pageable copy would wait for the GPU to catch up,
            # and sample() never synchronises with the host.
            pinned = self.device.type == "cuda"
            counts = torch.tensor(self._block_written, dtype=torch.long, pin_memory=pinned)
            self._env_written = counts.to(self.device, non_blocking=pinned)[self._block_of_env]
        return self._env_written

    # ---------------------------------------------------------------- state

    def state_dict(self, include_data: bool = True) -> dict[str, Any]:
        """Counters, and the raw storage (moved to CPU) when ``include_data``."""
        state: dict[str, Any] = {
            "written": self.written,
            "blocks": list(self.blocks),
            "block_written": list(self._block_written),
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
        self._env_written = None
        if "data" not in state:
            self._block_written = [0] * len(self.blocks)
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
        saved = tuple(state.get("blocks", (self.num_envs,)))  # saved before blocks existed: one block
        counts = [int(c) for c in state.get("block_written", [state["written"]] * len(saved))]
        if saved != self.blocks:
            if len(set(counts)) > 1:
                raise ReplayBufferError(
                    f"the replay state's env blocks {list(saved)} hold different step counts {counts}; this "
                    f"buffer has blocks {list(self.blocks)}: load it into a buffer with the same blocks, or "
                    "load the state without its data"
                )
            counts = counts[:1] * len(self.blocks)
        self._block_written = counts
