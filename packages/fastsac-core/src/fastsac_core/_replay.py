"""Replay buffer: per-env circular storage, next obs from the next slot, n-step returns.

# Note [replay layout]
# Storage is slot-major, ``(capacity, num_envs, ...)``, one tensor per transition field (``_schema``;
# flags stored as bool): one env step of all envs is one contiguous row, so ``extend`` is one copy per
# field and ``extend_batch`` (k steps) is at most two (split at the wrap). The envs form ``blocks`` of
# consecutive envs (one by default; one per collector when a learner ingests each collector's steps as
# they come), and each block has a host-side count of the steps ever written to its envs: the
# chronological step s of an env lives in slot ``s % capacity``. ``extend_batch`` writes every env at
# once (all blocks at the same count); ``extend_block`` writes one block's columns at its own count.
# While the counts differ, ``sample`` draws each env's start step from its own block's range (ragged
# ingest: wiki/async-engine.md, Drain and generations).
#
# next_obs is not stored. Envs auto-reset, so the obs written at step s+1 is the obs that followed
# step s -- except after an episode end, where it is the reset obs of the next episode:
#   * terminated at step s: the transition is complete without a next state (no bootstrap);
#   * truncated (time limit, not terminated) at step s: the true final obs is lost, so a transition
#     whose first step is truncated gets loss weight ``valid = 0`` (see wiki/algorithm.md);
# A transition starting at step s is *complete* once step s+1 is written (it needs that obs).
#
# n-step window from step s (``_nstep``): steps s, s+1, ... up to n of them, ending
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

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ._batch import Batch
from ._nstep import nstep_window
from ._replay_layout import ReplayLayout
from ._reward_scale import RewardScale
from ._schema import Transition, transition_fields
from .config import FastSACConfig
from .env import EnvDims
from .exceptions import ReplayBufferError

__all__ = ["Batch", "ReplayBuffer"]

_RENAMED = {"terminated": "dones", "truncated": "truncations"}
"""The flags' names in the replay data of checkpoints written before they took ``StepResult``'s."""

_REWARD_FIELDS = ("rewards", "terminated", "truncated")
"""What the reward scale observes of each stored step (Note [reward scale])."""

SNAPSHOT_CHUNK_BYTES = 64 << 20
"""Most bytes :meth:`ReplayBuffer.snapshot` copies at once: the bound of its device temporaries."""


def _to_host(source: Tensor, chunk_bytes: int) -> Tensor:
    """A CPU copy of ``source`` (any device, any strides), copied ``chunk_bytes`` of its rows at a time."""
    target = torch.empty(source.shape, dtype=source.dtype)
    row_bytes = max(source[:1].numel() * source.element_size(), 1)
    step = max(chunk_bytes // row_bytes, 1)
    for first in range(0, source.shape[0], step):
        target[first : first + step].copy_(source[first : first + step])
    return target


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
        reward_bound: Keep a running reward scale (``reward_scale``) whose scaled returns stay within
            this bound (Note [reward scale]); None keeps none (the scale stays 1). Rewards are stored raw.
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
        reward_bound: float | None = None,
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
        self.shared_obs = critic_obs_dim is None
        """Whether ``critic_obs`` is ``obs`` (no storage of its own; Note [replay layout])."""
        self.storage: dict[str, Tensor] = {}
        """Field name -> ``(capacity, num_envs, *shape)`` storage, in the schema's order."""
        for name, (shape, dtype) in transition_fields(obs_dim, critic_obs_dim, act_dim).items():
            size = (capacity_per_env, num_envs, *shape)
            self.storage[name] = (
                # NaN sentinels make any read of an unwritten slot obvious.
                torch.full(size, float("nan"), device=self.device)
                if dtype.is_floating_point
                else torch.zeros(size, dtype=torch.bool, device=self.device)
            )
        self._field_index = {name: i for i, name in enumerate(self.storage)}
        self.blocks = widths
        """Widths of the env blocks, in env order."""
        self._block_starts = tuple(sum(widths[:i]) for i in range(len(widths)))
        self.layout = ReplayLayout(
            num_envs=num_envs,
            capacity=capacity_per_env,
            blocks=widths,
            fields={name: tuple(storage.shape[2:]) for name, storage in self.storage.items()},
        )
        """Sizes, blocks and fields: what a snapshot must match to be restored here."""
        self._block_written = [0] * len(widths)
        self._env_written: Tensor | None = None  # per env, on the device; rebuilt after a write
        self._block_of_env = torch.arange(len(widths)).repeat_interleave(torch.tensor(widths)).to(self.device)
        self._step_powers = torch.arange(n_steps, device=self.device)
        self._discounts = gamma ** self._step_powers.to(torch.float32)
        self._env_index = torch.arange(num_envs, device=self.device)
        self.reward_scale = RewardScale(
            num_envs, gamma, reward_bound or 1.0, enabled=reward_bound is not None, device=self.device
        )
        """The running scale of the stored rewards, fed every stored step (Note [reward scale])."""

    @classmethod
    def of(
        cls,
        dims: EnvDims,
        cfg: FastSACConfig,
        num_envs: int,
        *,
        device: torch.device | str = "cpu",
        blocks: Sequence[int] | None = None,
    ) -> ReplayBuffer:
        """The buffer an agent of ``dims`` and ``cfg`` trains from (sizes, n-step, gamma, reward scale)."""
        return cls(
            num_envs, cfg.buffer_size, dims.obs_dim, dims.stored_critic_obs_dim, dims.act_dim,
            device=device, n_steps=cfg.num_steps, gamma=cfg.gamma, blocks=blocks,
            reward_bound=cfg.return_bound if cfg.reward_normalization else None,
        )  # fmt: skip

    # ---------------------------------------------------------------- writing

    def extend(self, transition: Transition) -> None:
        """Write one step of every env (fields ``(num_envs, ...)``, any device); see ``extend_batch``."""
        self.extend_batch({name: value.unsqueeze(0) for name, value in transition.items()})

    def extend_batch(self, transitions: Transition) -> None:
        """Write k consecutive steps, slot-major (fields ``(k, num_envs, ...)``); equals k ``extend``s.

        A buffer whose critic observes ``obs`` (``shared_obs``) ignores a ``critic_obs`` field (absent,
        or the obs again); any other buffer needs it.
        """
        if len(set(self._block_written)) > 1:
            raise ReplayBufferError(
                f"extend_batch writes every env at one step, but the env blocks hold {self._block_written} "
                "steps; write each block with extend_block"
            )
        values = self._values(transitions, self.num_envs)
        k = self._write(None, values, self._block_written[0])
        self._block_written = [w + k for w in self._block_written]
        self._env_written = None

    def extend_block(self, block: int, transitions: Transition) -> None:
        """Write k consecutive steps of env block ``block`` alone (fields ``(k, width, ...)``).

        The block's envs continue at their own count, whatever the other blocks hold; see
        ``extend_batch`` for ``critic_obs``.
        """
        if not 0 <= block < len(self.blocks):
            raise ReplayBufferError(f"block={block}; this buffer has blocks 0..{len(self.blocks) - 1}")
        width, start = self.blocks[block], self._block_starts[block]
        values = self._values(transitions, width)
        self._block_written[block] += self._write(
            slice(start, start + width), values, self._block_written[block]
        )
        self._env_written = None

    def _values(self, transitions: Transition, width: int) -> list[Tensor]:
        """The stored fields' values in storage order, shape-checked for ``width`` envs."""
        missing = [name for name in self.storage if name not in transitions]
        if missing == ["critic_obs"]:
            raise ReplayBufferError(
                "critic_obs is missing, but this buffer stores a critic observation of its own; pass it, "
                "or build the buffer with critic_obs_dim=None for a critic that observes obs"
            )
        if missing:
            raise ReplayBufferError(f"the transition has no {missing}; it needs {list(self.storage)}")
        k = transitions["obs"].shape[0]
        values = []
        for name, storage in self.storage.items():
            value = transitions[name]
            expected = (k, width, *storage.shape[2:])
            if tuple(value.shape) != expected:
                raise ReplayBufferError(f"{name} has shape {tuple(value.shape)}; expected {expected}")
            values.append(value)
        return values

    def _write(self, columns: slice | None, values: list[Tensor], written: int) -> int:
        """Copy k steps into ``columns`` (None: all envs) after ``written`` steps; returns k (all counted)."""
        k = values[0].shape[0]
        skip = max(0, k - self.capacity)  # only the newest `capacity` steps survive
        kept = k - skip
        start = (written + skip) % self.capacity
        first = min(kept, self.capacity - start)
        if skip and self.reward_scale.enabled:  # steps that never reach the storage still count
            self._observe_rewards(columns, *(values[self._field_index[f]][:skip] for f in _REWARD_FIELDS))
        values = [v[skip:] for v in values] if skip else values
        for storage, value in zip(self.storage.values(), values, strict=True):
            if columns is not None:
                storage = storage[:, columns]
            storage[start : start + first].copy_(value[:first], non_blocking=True)
            if first < kept:
                storage[: kept - first].copy_(value[first:], non_blocking=True)
        if self.reward_scale.enabled:
            # Read back from the storage: on its device, ordered after the copies on the same stream,
            # with no host synchronisation (the values may be host views of a ring).
            slots = (start + torch.arange(kept, device=self.device)) % self.capacity
            every = slice(None) if columns is None else columns
            self._observe_rewards(columns, *(self.storage[f][slots][:, every] for f in _REWARD_FIELDS))
        return k

    def _observe_rewards(
        self, columns: slice | None, rewards: Tensor, terminated: Tensor, truncated: Tensor
    ) -> None:
        """Feed k steps' rewards and episode ends of the envs ``columns`` to ``reward_scale``."""
        to = self.device  # a copy only for the steps a write longer than the buffer skips
        ended = terminated.to(to, torch.bool) | truncated.to(to, torch.bool)
        self.reward_scale.observe(rewards.to(to), ended, columns)

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
        fields = self.storage
        window = nstep_window(
            step, newest, env, terminated=fields["terminated"], truncated=fields["truncated"],
            rewards=fields["rewards"], powers=self._step_powers, discounts=self._discounts,
        )  # fmt: skip
        next_slot = (step + window.length) % cap
        first_slot = step % cap

        def rows(x: Tensor) -> Tensor:
            return x.reshape(batch_per_env * n, *x.shape[2:])

        obs, next_obs = rows(fields["obs"][first_slot, env]), rows(fields["obs"][next_slot, env])
        if self.shared_obs:
            critic_obs, next_critic_obs = obs, next_obs
        else:
            critic_obs = rows(fields["critic_obs"][first_slot, env])
            next_critic_obs = rows(fields["critic_obs"][next_slot, env])
        return Batch(
            obs=obs,
            critic_obs=critic_obs,
            actions=rows(fields["actions"][first_slot, env]),
            rewards=rows(window.rewards),
            next_obs=next_obs,
            next_critic_obs=next_critic_obs,
            bootstrap=rows((~window.terminated).float()),
            discount=rows(self.gamma ** window.length.float()),
            valid=rows(window.valid.float()),
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

    # ---------------------------------------------------------------- snapshots (the replay file)

    @torch.no_grad()
    def snapshot(self, *, chunk_bytes: int = SNAPSHOT_CHUNK_BYTES) -> dict[str, Any]:
        """A CPU copy of what a resume needs: counts, each block's filled rows, each env's running return.

        Only the written part of each block's storage is copied, in its stored dtype (Note [replay
        file] in ``_replay_file``), ``chunk_bytes`` of rows at a time: a block of a ragged buffer is a
        column slice, which a device-to-host copy first gathers into a contiguous temporary on the
        device, so copying it whole would take as much GPU memory again as the block; a chunk bounds
        that temporary (a block as wide as the buffer is contiguous and needs none). On CUDA the copy
        waits for the GPU's pending writes: the caller takes it after its ingest has landed, and the
        copy is what a writer thread may save while the buffer moves on.
        """
        data: dict[str, list[Tensor]] = {name: [] for name in self.storage}
        for width, start, written in zip(self.blocks, self._block_starts, self._block_written, strict=True):
            rows = min(written, self.capacity)
            for name, storage in self.storage.items():
                data[name].append(_to_host(storage[:rows, start : start + width], chunk_bytes))
        return {
            "num_envs": self.num_envs,
            "capacity": self.capacity,
            "blocks": list(self.blocks),
            "block_written": list(self._block_written),
            "data": data,
            "running_returns": self.reward_scale.running.to("cpu", copy=True),
        }

    @torch.no_grad()
    def restore(self, snapshot: dict[str, Any]) -> None:
        """Load a :meth:`snapshot` (any device's, any block layout whose blocks' envs hold equal counts).

        Raises:
            ReplayBufferError: The snapshot does not fit this buffer (``ReplayLayout.counts``: sizes,
                fields, shapes, or a block of this buffer would mix envs saved at different counts).
        """
        counts = self.layout.counts(snapshot)
        saved_data: dict[str, list[Tensor]] = snapshot["data"]
        start = 0
        for b, (width, written) in enumerate(zip(snapshot["blocks"], snapshot["block_written"], strict=True)):
            rows = min(int(written), self.capacity)
            for name, storage in self.storage.items():
                storage[:rows, start : start + int(width)].copy_(saved_data[name][b])
            start += int(width)
        self._block_written = counts
        self._env_written = None
        self.reward_scale.running.copy_(snapshot["running_returns"])

    @torch.no_grad()
    def cut_episodes(self) -> None:
        """End every env's stored history at its newest step: the next write does not follow it.

        For envs that restart their episodes (a resume without their state): the newest stored step
        of each env becomes a time-limit cut (``truncated``, unless it ended its episode already), so
        no transition reads the restarted env's first obs as its next obs (Note [replay layout]), and
        each env's running return starts again at 0 (Note [reward scale]).
        """
        for width, start, written in zip(self.blocks, self._block_starts, self._block_written, strict=True):
            if written:
                slot, columns = (written - 1) % self.capacity, slice(start, start + width)
                self.storage["truncated"][slot, columns] |= ~self.storage["terminated"][slot, columns]
        self.reward_scale.running.zero_()

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
            state["data"] = {name: storage.cpu() for name, storage in self.storage.items()}
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
        saved_data = state["data"]
        data = {name: saved_data.get(name, saved_data.get(_RENAMED.get(name))) for name in self.storage}
        missing = [name for name, source in data.items() if source is None]
        if missing:
            raise ReplayBufferError(
                f"the checkpoint's replay has no {missing} (saved by a task whose critic observes obs, so "
                "without critic_obs?); resume with the same task, or without the replay data"
            )
        for name, target in self.storage.items():
            source: Tensor = data[name]
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
