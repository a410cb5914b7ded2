"""Hosts agree on the run before anything starts: one line naming the host and the values otherwise.

Every host publishes a :class:`HostRecord` (what it would run) in the run's store, waits for every
other host's, and checks them against host 0's with :func:`check_agreement`: the same task, env
count per host, network sizes, batch size, learner count per host and device kind, and a batch that
divides across every env of every host (``fastsac_core.batch_per_env``, as each learner checks it).
A host that fails before it can publish its record publishes its error line instead, so every host
stops with it.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from dataclasses import dataclass
from typing import Any

from fastsac_core import ConfigError as AgentConfigError
from fastsac_core import batch_per_env
from fastsac_trainer.config.exceptions import TrainerAppError
from fastsac_trainer.config.validate import agent_config_error

__all__ = ["HostRecord", "check_agreement", "host_record", "render_hosts"]

_NETWORK = ("actor_hidden_dim", "critic_hidden_dim", "num_q_networks", "num_atoms", "use_layer_norm")
"""Agent settings that shape the networks every rank all-reduces."""


@dataclass(frozen=True, kw_only=True)
class HostRecord:
    """What one host would run, as it tells the other hosts."""

    host: int
    """Its host rank."""
    hostname: str
    """Its name (for the printed plan)."""
    settings: dict[str, Any]
    """Settings every host must share, by their config key."""
    learner_devices: list[str]
    """Its learners' devices, in local rank order."""
    collectors: int
    """Its collector processes."""
    error: str | None = None
    """The line it failed with before it could say what it would run (then nothing else is set)."""

    def to_json(self) -> str:
        """The record as the store keeps it."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> HostRecord:
        """A record read back from the store."""
        return cls(**json.loads(text))

    @classmethod
    def failed(cls, host: int, line: str) -> HostRecord:
        """The record of a host that stopped with ``line`` before it could publish its own."""
        return cls(host=host, hostname=socket.gethostname(), settings={}, learner_devices=[], collectors=0,
                   error=line)  # fmt: skip


def host_record(host: int, run: Any, topology: Any, resumed_at: int | None) -> HostRecord:
    """This host's record from its resolved run (``ResolvedRun``) and placement."""
    trainer = run.config["algo"]["trainer"]
    agent = dataclasses.asdict(run.agent)
    learners = [] if topology is None else [p.device for p in topology.learners]
    settings: dict[str, Any] = {
        "task": run.task_name,
        "task.num_envs": run.config["task"]["num_envs"],
        "algo.trainer.asynchronous": trainer["asynchronous"],
        "learners per host": len(learners),
        "learner device kind": sorted({d.split(":")[0] for d in learners}),
        **{f"algo.agent.{key}": agent[key] for key in _NETWORK},
        # every other hyper-parameter too: the ranks all-reduce their gradients as one learner
        **{f"algo.agent.{key}": value for key, value in sorted(agent.items()) if key not in _NETWORK},
        "algo.trainer.num_learning_iterations": trainer["num_learning_iterations"],
        "resumed at iteration": resumed_at,
    }
    return HostRecord(
        host=host,
        hostname=socket.gethostname(),
        settings=settings,
        learner_devices=learners,
        collectors=0 if topology is None else len(topology.collectors),
    )


def check_agreement(records: list[HostRecord]) -> None:
    """Check that ``records`` (one per host, host 0 first) describe one run.

    Raises:
        TrainerAppError: A host failed to start, hosts disagree on a setting, the run is not the
            asynchronous trainer, or the batch does not divide across every env of every host.
    """
    for record in records:
        if record.error is not None:
            raise TrainerAppError(f"host {record.host} ({record.hostname}) could not start: {record.error}")
    first = records[0]
    for record in records[1:]:
        for key, value in first.settings.items():
            if record.settings.get(key) != value:
                raise TrainerAppError(
                    f"hosts disagree on {key}: host 0 ({first.hostname}) has {value!r}, host {record.host} "
                    f"({record.hostname}) has {record.settings.get(key)!r}; start every host with the same "
                    "settings"
                )
    hosts = len(records)
    if not first.settings["algo.trainer.asynchronous"]:
        raise TrainerAppError(
            f"algo.trainer.asynchronous=False is invalid across {hosts} hosts: the synchronous trainer is "
            "one process; use algo.trainer.asynchronous=true (or run it without torchrun)"
        )
    try:
        batch_per_env(first.settings["algo.agent.batch_size"], hosts * first.settings["task.num_envs"])
    except AgentConfigError as error:
        raise agent_config_error(error) from None


def render_hosts(records: list[HostRecord], this_host: int, store: str) -> str:
    """The whole run, host by host: global learner ranks, devices, collectors and envs."""
    per_host = len(records[0].learner_devices)
    envs = records[0].settings["task.num_envs"]
    lines = [f"run across {len(records)} hosts (store {store}; this is host {this_host}):"]
    for r in records:
        ranks = ", ".join(f"{r.host * per_host + i} on {d}" for i, d in enumerate(r.learner_devices))
        lines.append(
            f"  host {r.host} ({r.hostname}): learner rank {ranks}; {r.collectors} collectors, {envs} envs"
        )
    learners = len(records) * per_host
    batch = records[0].settings["algo.agent.batch_size"]
    lines.append(
        f"  in all: {learners} learners, {len(records) * envs} envs, batch {batch} "
        f"({batch // learners} per learner); global rank 0 writes the checkpoints and TensorBoard events"
    )
    return "\n".join(lines)
