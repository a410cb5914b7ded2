"""The launch context: what torchrun tells the trainer about the hosts of its run.

One trainer per host, started by ``torchrun --nnodes N --nproc-per-node 1 --node-rank R ...`` (or
``srun ... torchrun ...``). torchrun exports, among others, ``GROUP_RANK`` (the node rank),
``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE`` (``N`` hosts of one process each), ``MASTER_ADDR`` and
``MASTER_PORT`` (the run's ``TCPStore``), ``TORCHELASTIC_USE_AGENT_STORE`` (``True`` when
torchrun's agent on host 0 serves that store, which is its default) and ``TORCHELASTIC_RUN_ID``
and ``TORCHELASTIC_RESTART_COUNT`` (this attempt). They are read here, once; without torchrun
there is no context and nothing changes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from fastsac_async import HostGroup
from fastsac_trainer.config.exceptions import TrainerAppError

__all__ = ["LaunchContext", "launch_context"]


@dataclass(frozen=True, kw_only=True)
class LaunchContext:
    """This host's place in a torchrun launch."""

    host_rank: int
    """torchrun's node rank (``GROUP_RANK``)."""
    num_hosts: int
    """Hosts of the run (``WORLD_SIZE / LOCAL_WORLD_SIZE``)."""
    store_host: str
    """``MASTER_ADDR``."""
    store_port: int
    """``MASTER_PORT``."""
    agent_store: bool
    """torchrun's agent serves the store (``TORCHELASTIC_USE_AGENT_STORE=True``); else host 0 does."""
    run_id: str
    """``TORCHELASTIC_RUN_ID``."""
    restart: int
    """``TORCHELASTIC_RESTART_COUNT``: keys of an earlier attempt are never read again."""

    def host_group(self) -> HostGroup:
        """The engine's view of this launch."""
        return HostGroup(
            host_rank=self.host_rank,
            num_hosts=self.num_hosts,
            store_host=self.store_host,
            store_port=self.store_port,
            store_prefix=f"fastsac/{self.run_id}/{self.restart}/",
            serve_store=not self.agent_store and self.host_rank == 0,
        )


def launch_context(environ: Mapping[str, str] | None = None) -> LaunchContext | None:
    """Torchrun's context from ``environ`` (default: this process's), or None when not under torchrun.

    Raises:
        TrainerAppError: torchrun starts more than one trainer per host.
    """
    env = os.environ if environ is None else environ
    if "TORCHELASTIC_RUN_ID" not in env or "GROUP_RANK" not in env:
        return None
    local = int(env.get("LOCAL_WORLD_SIZE", "1"))
    if local != 1:
        raise TrainerAppError(
            f"torchrun --nproc-per-node={local} is invalid: the trainer starts its own learners (one per "
            "GPU) and collectors; launch one trainer per host with --nproc-per-node 1"
        )
    return LaunchContext(
        host_rank=int(env["GROUP_RANK"]),
        num_hosts=int(env.get("WORLD_SIZE", "1")) // local,
        store_host=env.get("MASTER_ADDR", "127.0.0.1"),
        store_port=int(env.get("MASTER_PORT", "29500")),
        agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
        run_id=env["TORCHELASTIC_RUN_ID"],
        restart=int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
    )
