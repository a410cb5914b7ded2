"""Learners across hosts: where one host's learners sit in the run-wide process group.

# Note [learners across hosts]
A run on several hosts is one engine per host (its own collectors, rings and learners; nothing of
that crosses a host) whose learners all join ONE process group: host ``h``'s local learner ``r`` is
global rank ``h * local_learners + r`` in a world of ``num_hosts * local_learners`` (every host has
the same learner count; the app checks that before anything starts). The group forms through a
``TCPStore`` that every host can reach (torchrun's: its agent on host 0 serves it at
``MASTER_ADDR:MASTER_PORT``), under a prefix of its own, instead of the one-host file rendezvous.
From then on the lockstep decision, the gradient all-reduce and the normaliser merge run over that
group exactly as on one host, so the world trains like one learner on the global batch.

What stays per host: a learner's placement, its control slot, its snapshots and the parent's
stats are those of its local rank. What is global: its collective rank (rank 0 decides and is the
only one to checkpoint), its seed (no two hosts step the same env stream) and the world size the
batch is split over.
"""

from __future__ import annotations

import datetime
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch.distributed import Store  # type: ignore[attr-defined]

    from fastsac_async.spec import EngineSpec

__all__ = [
    "HostGroup",
    "actor_digest",
    "collector_seed",
    "has_evaluator",
    "init_host_group",
    "iteration_env_steps",
    "learner_rank",
    "learner_seed",
    "learner_world",
    "open_store",
]


@dataclass(frozen=True, kw_only=True)
class HostGroup:
    """This host's place in a run across several hosts (Note [learners across hosts])."""

    host_rank: int
    """This host's rank (torchrun's node rank): 0 writes the run's logs, events and checkpoints."""
    num_hosts: int
    """Hosts of the run."""
    store_host: str
    """Address of the run's ``TCPStore``."""
    store_port: int
    """Port of the run's ``TCPStore``."""
    store_prefix: str
    """Prefix of every key this run sets in the store (the store may serve others too)."""
    serve_store: bool = False
    """Host 0's parent serves the store itself (False: the launcher's agent serves it, torchrun's
    ``TORCHELASTIC_USE_AGENT_STORE``)."""

    @property
    def primary(self) -> bool:
        """True on host 0, whose global learner rank 0 writes the run's outputs."""
        return self.host_rank == 0

    def collector_offset(self, local_collectors: int) -> int:
        """Index of this host's first collector among every host's (for seeds)."""
        return self.host_rank * local_collectors


def learner_rank(spec: EngineSpec, local_rank: int) -> int:
    """Global collective rank of local learner ``local_rank`` (the local rank on one host)."""
    if spec.hosts is None:
        return local_rank
    return spec.hosts.host_rank * spec.num_learners + local_rank


def has_evaluator(spec: EngineSpec) -> bool:
    """Whether this host runs the evaluator: evaluation is on and this host holds the run's rank 0.

    Rank 0 ships it the reader of its first collector's weight channel (Note [evaluation during
    training] in ``fastsac_async.evaluator.loop``).
    """
    return spec.run.evaluation is not None and learner_rank(spec, 0) == 0


def collector_seed(spec: EngineSpec, index: int) -> int:
    """Seed of local collector ``index``: ``seed + i`` for the run-wide collector index ``i``."""
    offset = 0 if spec.hosts is None else spec.hosts.collector_offset(spec.num_collectors)
    return spec.run.seed + offset + index


def learner_seed(spec: EngineSpec, local_rank: int) -> int:
    """Seed of local learner ``local_rank``: ``seed + 1000 + r`` for its global rank ``r``."""
    return spec.run.seed + 1000 + learner_rank(spec, local_rank)


def iteration_env_steps(num_envs: int, hosts: HostGroup | None) -> int:
    """Env steps of one iteration (a full env batch) of the whole run: one host's ``num_envs`` x the hosts.

    Every host steps as many envs, in lockstep with the others. The run's env steps are its iterations
    times this: what its checkpoints record and its metrics are plotted against.
    """
    return num_envs * (1 if hosts is None else hosts.num_hosts)


def learner_world(spec: EngineSpec) -> int:
    """Learners of the whole run, every host's."""
    return spec.num_learners * (1 if spec.hosts is None else spec.hosts.num_hosts)


def open_store(hosts: HostGroup, timeout_s: float, *, serve: bool = False, suffix: str = "") -> Store:
    """A client (or, with ``serve``, the server) of the run's store, under its prefix (+ ``suffix``).

    Raises:
        RuntimeError: The store cannot be reached within ``timeout_s`` (torch's error).
    """
    from torch.distributed import PrefixStore, TCPStore  # type: ignore[attr-defined]

    store = TCPStore(
        hosts.store_host,
        hosts.store_port,
        is_master=serve,
        timeout=datetime.timedelta(seconds=timeout_s),
        wait_for_workers=False,
    )
    return PrefixStore(hosts.store_prefix + suffix, store)


def init_host_group(spec: EngineSpec, local_rank: int, backend: str, device: torch.device | None) -> None:
    """Join the run-wide learner group through the run's store (Note [learners across hosts])."""
    import torch.distributed as dist

    assert spec.hosts is not None
    dist.init_process_group(
        backend,
        store=open_store(spec.hosts, spec.rendezvous_timeout_s, suffix="learners/"),
        rank=learner_rank(spec, local_rank),
        world_size=learner_world(spec),
        timeout=datetime.timedelta(seconds=spec.rendezvous_timeout_s),
        device_id=device,
    )


def actor_digest(flat: torch.Tensor) -> str:
    """A short hash of a learner's flattened actor parameters (ranks in lockstep log the same one)."""
    data = flat.detach().to("cpu", torch.float32).contiguous().numpy().tobytes()
    return hashlib.sha256(data).hexdigest()[:16]
