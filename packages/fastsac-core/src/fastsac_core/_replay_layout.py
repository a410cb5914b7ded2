"""What a replay buffer stores, without its storage: the one rule of which saved replay it can restore.

A learner restoring its replay file (``ReplayBuffer.restore``) and a launcher telling the user before
anything starts whether that restore will work (``peek_replay(path, fits=...)``) both ask
:meth:`ReplayLayout.counts`, so the resume line never promises a replay the learner then refuses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._schema import transition_fields
from .config import FastSACConfig
from .env import EnvDims
from .exceptions import ReplayBufferError

__all__ = ["ReplayLayout"]


@dataclass(frozen=True, kw_only=True)
class ReplayLayout:
    """Sizes, env blocks and fields of a replay buffer (Note [replay layout] in ``_replay``)."""

    num_envs: int
    """Envs written per step."""
    capacity: int
    """Steps kept per env."""
    blocks: tuple[int, ...]
    """Widths of the env blocks, in env order (they sum to ``num_envs``)."""
    fields: Mapping[str, tuple[int, ...]]
    """Stored field name -> per-env shape."""

    @classmethod
    def of(
        cls, dims: EnvDims, cfg: FastSACConfig, num_envs: int, blocks: Sequence[int] | None = None
    ) -> ReplayLayout:
        """The layout of ``ReplayBuffer.of(dims, cfg, num_envs, blocks=blocks)``, without allocating it."""
        fields = transition_fields(dims.obs_dim, dims.stored_critic_obs_dim, dims.act_dim)
        return cls(
            num_envs=num_envs,
            capacity=cfg.buffer_size,
            blocks=(num_envs,) if blocks is None else tuple(int(b) for b in blocks),
            fields={name: shape for name, (shape, _) in fields.items()},
        )

    def counts(self, snapshot: Mapping[str, Any]) -> list[int]:
        """Each of this layout's blocks' step count once ``snapshot`` (``ReplayBuffer.snapshot()``) fits it.

        Reads only the snapshot's counts and its tensors' shapes (a memory-mapped file is not read).

        Raises:
            ReplayBufferError: The snapshot is of another size or fields, one of its tensors has another
                shape, or a block of this layout would hold envs saved at different counts (the env
                blocks changed under uneven counts). The message names what differs and the fix.
        """
        if (snapshot["num_envs"], snapshot["capacity"]) != (self.num_envs, self.capacity):
            raise ReplayBufferError(
                f"the saved replay has num_envs={snapshot['num_envs']}, capacity={snapshot['capacity']};"
                f" this buffer has num_envs={self.num_envs}, capacity={self.capacity};"
                " resume with the same task.num_envs per learner and algo.agent.buffer_size"
            )
        saved_data: Mapping[str, Sequence[Any]] = snapshot["data"]
        if set(saved_data) != set(self.fields):
            raise ReplayBufferError(
                f"the saved replay holds the fields {sorted(saved_data)}; this buffer stores"
                f" {sorted(self.fields)}: resume with the task it was saved with"
            )
        saved_blocks = [int(b) for b in snapshot["blocks"]]
        saved_counts = [int(c) for c in snapshot["block_written"]]
        for b, width in enumerate(saved_blocks):
            rows = min(saved_counts[b], self.capacity)
            for name, shape in self.fields.items():
                block = saved_data[name][b]
                if tuple(block.shape) != (rows, width, *shape):
                    raise ReplayBufferError(
                        f"saved replay field {name!r} of block {b} has shape {tuple(block.shape)};"
                        f" expected {(rows, width, *shape)}: the file is not this buffer's"
                    )
        per_env = [c for c, b in zip(saved_counts, saved_blocks, strict=True) for _ in range(b)]
        counts, start = [], 0
        for width in self.blocks:
            mine = set(per_env[start : start + width])
            if len(mine) != 1:
                raise ReplayBufferError(
                    f"the saved replay's env blocks {saved_blocks} hold different step counts"
                    f" {saved_counts}, and this buffer's blocks {list(self.blocks)} would mix them:"
                    " resume with the same async_options.num_collectors per learner"
                )
            counts.append(mine.pop())
            start += width
        return counts
