"""Options of the asynchronous trainer (``algo.trainer.async_options.*``), names from the seeds.

An :class:`AsyncOptions` checks its own values when it is built (one rule per field, below): every
layer above (the engine, the app) trusts a record that exists. The count rules between settings
(``num_envs % num_collectors`` and the like) are topology's (``fastsac_topology.check_counts``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal

from fastsac_async.exceptions import AsyncConfigError

__all__ = ["AsyncOptions"]

Switch = Literal["auto", "on", "off"]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_Rule = tuple[Callable[[Any], bool], str]

_RULES: dict[str, _Rule] = {
    "num_collectors": (lambda v: _count(v) and v >= 1, "use at least 1 collector"),
    "num_learners": (lambda v: _count(v) and v >= 1, "use at least 1 learner"),
    "cpus_per_collector": (
        lambda v: v is None or (_count(v) and v >= 1),
        "use a positive CPU count, or None (unpinned)",
    ),
    "ring_capacity": (lambda v: _count(v) and v >= 1, "use a positive slot count, e.g. 64"),
    "max_lead": (
        lambda v: v is None or (_count(v) and v >= 1),
        "use a positive slot count, or None (the ring)",
    ),
    "utd_mode": (lambda v: v in ("strict", "learner_bound"), "use strict or learner_bound"),
    "weight_publish_interval": (lambda v: _count(v) and v >= 1, "use a positive number of updates"),
    "weight_poll_interval": (lambda v: _count(v) and v >= 1, "use a positive number of env steps"),
    "max_ingest_per_iter": (lambda v: _count(v) and v >= 1, "use a positive number of slots"),
    "ingest": (lambda v: v in ("generations", "ragged"), "use generations or ragged (the default)"),
    "idle_sleep_s": (lambda v: _number(v) and v >= 0, "use 0 or a positive number of seconds"),
    "collector_spin_s": (
        lambda v: _number(v) and 0 <= v <= 1,
        "use 0 (sleep at once) up to 1 s (a collector sees a stop request only between its waits)",
    ),
    "transition_ipc": (lambda v: v in ("auto", "on", "off"), "use auto, on or off"),
    "weight_ipc": (lambda v: v in ("auto", "on", "off"), "use auto, on or off"),
    "weight_ipc_min_bytes": (lambda v: _count(v) and v >= 0, "use 0 or a positive byte count"),
    "boot_timeout_s": (lambda v: _number(v) and v > 0, "use a positive number of seconds"),
}
"""The value rule of each checked field: (accepts, the fix the error names)."""


@dataclass(frozen=True, kw_only=True)
class AsyncOptions:
    """How collectors and learners are laid out and how they exchange data."""

    num_collectors: int = 1
    """Collector processes; num_envs must be divisible by it (checked by topology, which knows num_envs)."""
    num_learners: int = 1
    """Learner processes (one per device, DDP in lockstep); num_collectors must be divisible by it."""
    learner_devices: tuple[str, ...] | None = None
    """Explicit learner devices (e.g. ("cuda:0", "cuda:1")); None expands from the trainer device."""
    cpus_per_collector: int | None = None
    """CPUs given to each collector, carved from its node; None leaves collectors unpinned."""
    ring_capacity: int = 64
    """Slots per collector ring; each slot holds one env-step batch of that collector's envs."""
    max_lead: int | None = 4
    """strict mode: a collector waits while this many of its steps are still unread by its learner,
    which bounds how stale the policy it acts with is (Note [strict lead] in ``collector.loop``);
    None, or a value of at least ``ring_capacity``: the ring is the only bound. learner_bound ignores
    it: its collectors run as far as the ring lets them."""
    utd_mode: Literal["strict", "learner_bound"] = "strict"
    """strict: num_updates per collected iteration; learner_bound: num_updates whenever data arrived."""
    weight_publish_interval: int = 4
    """Publish actor weights every this many updates."""
    weight_poll_interval: int = 1
    """Collectors poll for new weights every this many env steps."""
    max_ingest_per_iter: int = 8
    """Slots drained per ring per learner loop."""
    ingest: Literal["generations", "ragged"] = "ragged"
    """ragged (default): each collector's slots go to its own env block of the replay buffer as they
    come, so no collector waits for a slower one (Note [ragged ingest]; 21-24 % more updates/s in
    training, wiki/benchmarks.md); generations: a learner ingests env step k once every collector
    delivered it (one slot from each ring), keeping every env at one step count."""
    idle_sleep_s: float = 0.0005
    """Back-off sleep of a collector without room (a full ring, or its lead) or of a learner with
    nothing to do."""
    collector_spin_s: float = 0.0
    """A collector without room (a full ring, or its lead) polls its ring for up to this long before
    each back-off sleep (0: sleep at once). For collectors with CPUs of their own: on a VM an idle
    vCPU steps slower once it wakes (wiki/benchmarks.md, Collector scaling); spinning keeps it busy.
    Leave 0 for unpinned collectors. At most 1 s: a collector sees a stop request only between
    waits."""
    collector_inference_device: str = "auto"
    """cpu, cuda, cuda:N, or auto: the collector's own CPU when its owner learns on a GPU and the policy
    call is small (``fastsac_topology.policy_fits_a_core``) and no CUDA-IPC transport is "on", else the
    owner learner's device."""
    collector_compile: bool = False
    """Compile the fixed-batch collector policy (CUDA inference only). Off by default: the compile holds
    every collector's start for seconds, for a small part of its step (wiki/benchmarks.md, Collector
    inference)."""
    collector_amp: bool = True
    """Autocast collector inference (CUDA inference only)."""
    transition_ipc: Switch = "auto"
    """CUDA-IPC transition rings where every collector of a rank infers on the rank's GPU."""
    weight_ipc: Switch = "auto"
    """CUDA-IPC weight channel on the same GPU, for actors of at least weight_ipc_min_bytes."""
    weight_ipc_min_bytes: int = 16 * 1024 * 1024
    """Size gate of the CUDA-IPC weight channel under auto."""
    boot_timeout_s: float = 600.0
    """Longest wait for every worker to report ready."""

    def __post_init__(self) -> None:
        """Check every field against its rule.

        Raises:
            AsyncConfigError: The first invalid field, with its name, the value seen and the fix.
        """
        for f in fields(self):
            rule = _RULES.get(f.name)
            value = getattr(self, f.name)
            if rule is not None and not rule[0](value):
                raise AsyncConfigError.of_option(f.name, value, rule[1])

    def collector_lead(self) -> int | None:
        """Unread steps at which a collector waits before its ring is full (None: only a full ring)."""
        if self.utd_mode != "strict" or self.max_lead is None or self.max_lead >= self.ring_capacity:
            return None
        return self.max_lead
