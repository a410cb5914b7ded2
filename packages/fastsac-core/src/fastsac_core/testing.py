"""Helpers for tests (this package's and others'): tiny configs, random data, a DDP rank worker.

Kept in the package (not in a test folder) so spawned processes can import them by name.
"""

from __future__ import annotations

import dataclasses
import datetime
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ._agent import FastSACAgent, UpdateNoise
from ._batch import Batch
from ._replay import ReplayBuffer
from ._step_graph import StepGraph
from .config import FastSACConfig
from .env import EnvDims

__all__ = [
    "TINY_DIMS",
    "TINY_SHARED_DIMS",
    "config_fields",
    "make_agent",
    "random_batch",
    "random_noise",
    "run_ddp_rank",
    "run_processes",
    "tiny_config",
]

TINY_DIMS = EnvDims(
    obs_dim=6, critic_obs_dim=8, act_dim=3, action_low=(-1.0, -2.0, 0.0), action_high=(1.0, 2.0, 1.0)
)
"""Small task dimensions with asymmetric, non-unit action bounds."""

TINY_SHARED_DIMS = dataclasses.replace(TINY_DIMS, critic_obs_dim=TINY_DIMS.obs_dim, critic_obs_is_obs=True)
"""``TINY_DIMS`` for a critic that observes the actor's obs (``critic_obs_is_obs``)."""


def tiny_config(**overrides: Any) -> FastSACConfig:
    """A config with tiny networks and batches that runs in milliseconds per update on a CPU."""
    base: dict[str, Any] = {
        "actor_hidden_dim": 32,
        "critic_hidden_dim": 32,
        "num_atoms": 21,
        "v_min": -5.0,
        "v_max": 5.0,
        "batch_size": 64,
        "buffer_size": 64,
        "num_updates": 4,
        "policy_frequency": 2,
        "compile": False,
        "compile_in_background": False,  # a test that compiles compares the compiled steps from the start
        "compile_warmer": False,  # a background compile builds in its own process only where a test asks
    }
    base.update(overrides)
    return FastSACConfig(**base)


def make_agent(
    dims: EnvDims, cfg: FastSACConfig, device: torch.device | str = "cpu", *, num_envs: int, **kwargs: Any
) -> FastSACAgent:
    """An agent whose replay buffer (``ReplayBuffer.of``) holds ``num_envs`` envs on ``device``."""
    return FastSACAgent(
        dims, cfg, device, buffer=ReplayBuffer.of(dims, cfg, num_envs, device=device), **kwargs
    )


def random_batch(rows: int, dims: EnvDims, generator: torch.Generator) -> Batch:
    """A batch of random (unnormalised) transitions, some terminal and some invalid.

    With ``dims.critic_obs_is_obs`` the critic fields are the obs fields, as ``ReplayBuffer.sample``
    returns them (the same random draws are made either way).
    """

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    def uniform(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=generator)

    low, high = torch.tensor(dims.action_low), torch.tensor(dims.action_high)
    batch = Batch(
        obs=3.0 + 2.0 * randn(rows, dims.obs_dim),
        critic_obs=-1.0 + 0.5 * randn(rows, dims.critic_obs_dim),
        actions=low + (high - low) * uniform(rows, dims.act_dim),
        rewards=randn(rows),
        next_obs=3.0 + 2.0 * randn(rows, dims.obs_dim),
        next_critic_obs=-1.0 + 0.5 * randn(rows, dims.critic_obs_dim),
        bootstrap=(uniform(rows) > 0.1).float(),
        discount=torch.full((rows,), 0.97),
        valid=(uniform(rows) > 0.05).float(),
    )
    if dims.critic_obs_is_obs:
        return batch._replace(critic_obs=batch.obs, next_critic_obs=batch.next_obs)
    return batch


def random_noise(rows: int, dims: EnvDims, generator: torch.Generator) -> UpdateNoise:
    """Policy noise for ``FastSACAgent.update_on_batch``."""
    return UpdateNoise(
        torch.randn(rows, dims.act_dim, generator=generator),
        torch.randn(rows, dims.act_dim, generator=generator),
    )


def _rank_rows(rows: int, num_updates: int, rank: int, world_size: int) -> torch.Tensor:
    """Row indices of ``rank``'s share: its slice of every one of the ``num_updates`` minibatches."""
    size = rows // num_updates
    share = size // world_size
    return torch.cat(
        [torch.arange(i * size + rank * share, i * size + (rank + 1) * share) for i in range(num_updates)]
    )


def run_ddp_rank(
    rank: int,
    world_size: int,
    init_file: str,
    out_file: str,
    cfg_fields: dict[str, Any],
    calls: int,
    num_updates: int,
    data_seed: int,
    device: str = "cpu",
    shared_obs: bool = False,
) -> None:
    """One gloo rank of the DDP-equivalence check: train on this rank's share, save the final state.

    Every rank (and the single-process reference, with ``world_size=1``) regenerates the same full
    batches and noise from ``data_seed`` and keeps its rows, so the union over ranks of each
    minibatch equals the reference minibatch. ``device="cuda"`` uses NCCL and GPU ``rank``;
    ``shared_obs`` trains a critic that observes obs (``TINY_SHARED_DIMS``).
    """
    torch.manual_seed(1234 + rank)  # different on purpose: the initial broadcast must align the ranks
    torch.set_num_threads(1)
    cfg = FastSACConfig(**cfg_fields)
    if world_size > 1:
        dist.init_process_group(
            "nccl" if device == "cuda" else "gloo",
            init_method=f"file://{init_file}",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=60),
        )
    try:
        where = torch.device(f"cuda:{rank}") if device == "cuda" else torch.device("cpu")
        if where.type == "cuda":
            torch.cuda.set_device(where)
        dims = TINY_SHARED_DIMS if shared_obs else TINY_DIMS
        agent = make_agent(dims, cfg, where, num_envs=1, world_size=world_size)
        generator = torch.Generator().manual_seed(data_seed)
        rows = cfg.batch_size * num_updates
        keep = _rank_rows(rows, num_updates, rank, world_size)
        metrics = []
        for _ in range(calls):
            batch = random_batch(rows, dims, generator)
            noise = random_noise(rows, dims, generator)
            mine = Batch(*(t[keep] for t in batch))
            my_noise = UpdateNoise(*(t[keep] for t in noise))
            my_noise = UpdateNoise(*(t.to(where) for t in my_noise))
            metrics.append(
                {k: v.cpu() for k, v in agent.update_on_batch(mine, num_updates, my_noise).items()}
            )
        state = {
            "actor": agent.flatten_actor_params().cpu(),
            "qf": torch.cat([p.detach().reshape(-1) for p in agent.model.qf.parameters()]).cpu(),
            "qf_target": torch.cat([p.reshape(-1) for p in agent.model.qf_target.parameters()]).cpu(),
            "log_alpha": agent.model.log_alpha.detach().cpu(),
            "obs_normalizer": {k: v.cpu() for k, v in agent.obs_normalizer.state_dict().items()},
            "critic_obs_normalizer": {
                k: v.cpu() for k, v in agent.critic_obs_normalizer.state_dict().items()
            },
            "metrics": metrics,
            # Whether the critic and actor steps ended up replaying captured whole-step graphs.
            "step_graphs": [
                isinstance(f, StepGraph) and f.captured for f in (agent.steps.critic, agent.steps.actor)
            ],
        }
        torch.save(state, Path(out_file))
    finally:
        if world_size > 1:
            dist.destroy_process_group()


def run_processes(commands: Sequence[Sequence[str]], timeout_s: float = 120.0) -> list[int]:
    """Start every command at once (fresh interpreters: the ranks of one process group) and wait for all.

    Subprocesses rather than ``multiprocessing``, which would leave its resource-tracker process
    running after a test. A command still running after ``timeout_s`` is killed.

    Returns:
        The exit codes, in the order of ``commands``.
    """
    procs = [subprocess.Popen(list(command)) for command in commands]
    try:
        return [p.wait(timeout=timeout_s) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def config_fields(cfg: FastSACConfig) -> dict[str, Any]:
    """``cfg`` as keyword arguments (picklable for spawned processes)."""
    return dataclasses.asdict(cfg)
