"""The learner process: bound and seeded, then its group, agent, rings and writers; publish, learn.

Its collectors' rings and weight writers open from the parent's offers (Note [transport by name] in
``fastsac_async.transport``); the initial weights go out before the slots are shipped.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from fastsac_async.control import Control
from fastsac_async.hosts import (
    actor_digest,
    has_evaluator,
    init_host_group,
    iteration_env_steps,
    learner_rank,
    learner_seed,
    learner_world,
)
from fastsac_async.learner.collective import Collective, SoloCollective, TorchCollective
from fastsac_async.learner.cpu_loan import borrowed_cpus, compile_cpus
from fastsac_async.learner.decider import TrainDecider
from fastsac_async.learner.loop import Learner, LearnerHooks, LearnerSettings, run_learner_loop
from fastsac_async.learner.profiler import profile_window
from fastsac_async.spec import EngineSpec
from fastsac_async.stats import offer
from fastsac_async.transport import LearnerEnds, RingOffer, WeightOffer
from fastsac_async.worker_process import (
    bind,
    collector_name,
    evaluator_name,
    reporting_failure,
    worker_boot,
)
from fastsac_core import (
    CheckpointError,
    FastSACAgent,
    ReplayBuffer,
    ReplaySaver,
    load_checkpoint,
    load_replay,
    write_bound_s,
)
from shm_transport import StartupHandshake

__all__ = ["run_learner"]

_log = logging.getLogger(__name__)


def _init_process_group(spec: EngineSpec, rank: int, device: torch.device) -> Collective:
    if learner_world(spec) == 1:
        return SoloCollective()
    import torch.distributed as dist

    backend = "nccl" if device.type == "cuda" else "gloo"
    if spec.hosts is not None:  # Note [learners across hosts]
        init_host_group(spec, rank, backend, device if device.type == "cuda" else None)
    else:
        dist.init_process_group(
            backend,
            init_method=f"file://{spec.run.layout.rendezvous}",
            rank=rank,
            world_size=spec.num_learners,
            timeout=datetime.timedelta(seconds=spec.rendezvous_timeout_s),
            device_id=device if device.type == "cuda" else None,
        )
    place = spec.topology.learners[rank]
    # NCCL init may reset the affinity: check it again.
    if place.cpus is not None and os.sched_getaffinity(0) != set(place.cpus):
        _log.warning("CPU affinity changed during process-group init; binding again")
        bind(place.cpus, None)
    return TorchCollective(device if backend == "nccl" else torch.device("cpu"))


def run_learner(
    *,
    name: str,
    run_dir: Path,
    parent_pid: int,
    threads: int,
    spec: EngineSpec,
    rank: int,
    control: Control,
    handshake: StartupHandshake,
    stats_queue: Any,
    ring_offers: dict[int, RingOffer],
    weight_offers: dict[int, WeightOffer],
) -> None:
    """Learner process: bind, join the group, build the agent, ship slots, publish, then learn.

    ``ring_offers`` and ``weight_offers`` hold this rank's collectors' transports (Note [transport by name]).
    """
    place = spec.topology.learners[rank]
    with worker_boot(
        name=name, run_dir=run_dir, parent_pid=parent_pid, threads=threads, cpus=place.cpus,
        node=place.numa_node, seed_value=learner_seed(spec, rank), stats_queue=stats_queue,
    ) as boot:  # fmt: skip
        device = torch.device(place.device)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        collective = _init_process_group(spec, rank, device)
        boot.mark(f"on {device}, rank {learner_rank(spec, rank)} of {learner_world(spec)} learner(s)")
        agent, start_gstep, start_updates, start_owed = _agent(spec, rank, device, boot.mark)
        own = spec.topology.collectors_of(rank)
        with (
            contextlib.ExitStack() as cleanup,
            reporting_failure(control, control.learner_slot(rank), run_dir, name),
        ):
            # Runs last on the way out (first registered): the group outlives the rings' teardown.
            if learner_world(spec) > 1:
                cleanup.callback(_destroy_process_group)
            ends = LearnerEnds(device, spec.shutdown_timeout_s)
            cleanup.callback(ends.close)
            payloads = [
                (collector_name(c.index), ends.open(ring_offers[c.index], weight_offers[c.index]))
                for c in own
            ]
            learner = _learner(
                spec, rank, agent, ends, collective, control, stats_queue, start_gstep, start_owed
            )
            learner.resume_at(start_gstep, start_updates)
            # Weights first, then the slots: a collector's first poll finds the learner's actor (the
            # checkpoint's, on a resume), never nothing.
            learner.publish(wait=True)
            for collector, payload in payloads:
                handshake.ship(collector, payload)
            if has_evaluator(spec) and learner_rank(spec, rank) == 0:  # it reads the first collector's
                handshake.ship(evaluator_name(), payloads[0][1].weights)
            boot.mark(f"initial weights published, slots shipped to {len(own)} collector(s)")
            handshake.report_ready(name)
            handshake.wait_released(
                timeout_s=spec.options.boot_timeout_s, should_stop=lambda: control.stop_requested
            )
            boot.released()
            # A compile thread is not waited for: this process ends with os._exit, which it does not
            # hold up, and a wait would spend the stop's grace (stop_grace_s).
            window = profile_window()
            run_learner_loop(
                learner, profile=window.iterations, after_updates=window.after_updates, name=name,
                compile_wait_s=0.0,
            )  # fmt: skip
            # Note [a stop waits for the replay write]: until done, the parent's abort waits.
            control.hold_stop(rank, time.monotonic() + write_bound_s(agent.buffer))
            final = learner.checkpoint()  # rank 0: the final checkpoint (also after a stop request)
            if final is not None:
                control.set_final_checkpoint(learner.gstep)  # before done: the parent reads it then
            learner.save_replay()  # every rank: its shard of the replay, of the final checkpoint's gstep
            offer(stats_queue, learner.snapshot())
            _log.info(
                "%s done at gstep %d after %d updates (actor %s)",
                name, learner.gstep, learner.updates, actor_digest(agent.flatten_actor_params()),
            )  # fmt: skip
            control.mark_learner_done(rank)
            deadline = time.monotonic() + spec.shutdown_timeout_s
            while not control.learners_released and time.monotonic() < deadline:
                time.sleep(0.02)


def _agent(
    spec: EngineSpec, rank: int, device: torch.device, mark: Callable[[str], None]
) -> tuple[FastSACAgent, int, int, int]:
    """Rank ``rank``'s agent for its collectors' envs; the gstep, updates and owed updates it starts at.

    ``mark`` logs each boot phase as it ends (the buffer, the agent, a resume's state and replay).
    Owed updates: Note [a stop keeps what was counted] in ``fastsac_async.learner.loop``.
    """
    layout = spec.replay_layout(rank)
    buffer = ReplayBuffer.of(spec.run.dims, spec.agent, layout.num_envs, device=device, blocks=layout.blocks)
    mark(f"replay buffer of {buffer.capacity * buffer.num_envs:,} transitions allocated on {device}")
    # A background compile builds on the collectors' CPUs too (Note [compile on borrowed CPUs]).
    # So does its compile warmer, a process of its own (Note [compile warmer] in fastsac_core).
    cpus = compile_cpus(spec, rank)
    lend = functools.partial(borrowed_cpus, cpus, beside_main=True)
    agent = FastSACAgent(
        spec.run.dims, spec.agent, device, buffer=buffer, world_size=learner_world(spec),
        compile_context=lend, compile_cpus=cpus,
    )  # fmt: skip
    mark("agent built")
    if spec.run.resume_from is None:
        return agent, 0, 0, 0
    # Only rank 0 takes the saved RNG state: every rank restoring it would sample the same
    # indices and noise on every rank. The others keep their own seeds.
    extra = load_checkpoint(spec.run.resume_from, agent, restore_rng=learner_rank(spec, rank) == 0)
    restored = _restore_replay(spec, rank, agent.buffer)
    gstep, updates, owed = (int(extra.get(key, 0)) for key in ("iteration", "updates", "owed_updates"))
    replay = f"replay of {restored:,} transitions" if restored is not None else "an empty replay buffer"
    mark(f"resumed at gstep {gstep}: checkpoint loaded, {replay}")
    return agent, gstep, updates, owed


def _restore_replay(spec: EngineSpec, rank: int, buffer: ReplayBuffer) -> int | None:
    """Rank ``rank``'s shard of a resumed run's replay, if saved; its newest steps become cuts.

    The collectors restart their episodes (their envs' state is not saved), so each env's newest
    stored step is cut (``ReplayBuffer.cut_episodes``). A missing or unreadable file leaves the buffer
    empty, with a log line saying why; the run goes on. Returns the transitions restored (None: none).
    """
    host = 0 if spec.hosts is None else spec.hosts.host_rank
    source = spec.run.replay_to_resume(learner_rank(spec, rank), host)
    if source is None or not source.is_file():
        why = "algo.trainer.save_replay=false" if source is None else f"{source} does not exist"
        _log.info("learner%d: learning restarts from an empty replay buffer (%s)", rank, why)
        return None
    try:
        info = load_replay(source, buffer)
    except CheckpointError as exc:
        _log.warning("learner%d: %s; learning restarts from an empty replay buffer", rank, exc)
        return None
    buffer.cut_episodes()
    _log.info(
        "learner%d: replay buffer restored from %s: %d transitions of gstep %d, written %.0f s ago",
        rank, source, info.transitions, info.gstep, time.time() - info.written_at,
    )  # fmt: skip
    return info.transitions


def _learner(
    spec: EngineSpec,
    rank: int,
    agent: FastSACAgent,
    ends: LearnerEnds,
    collective: Collective,
    control: Control,
    stats_queue: Any,
    start_gstep: int,
    start_owed: int,
) -> Learner:
    """Rank ``rank``'s loop over its opened ends, wired to the shared counters and the stats queue."""
    indices = [c.index for c in spec.topology.collectors_of(rank)]
    budget = spec.run.num_iterations
    return Learner(
        rank=rank,
        agent=agent,
        rings=ends.rings,
        writers=ends.writers,
        decider=TrainDecider(
            collective,
            num_collectors=spec.num_collectors,
            num_updates=spec.agent.num_updates,
            learning_starts=spec.agent.learning_starts,
            utd_mode=spec.options.utd_mode,
            start_gstep=start_gstep,
            start_owed=start_owed,
            max_run=spec.agent.num_updates * spec.options.max_ingest_per_iter,
        ),
        settings=LearnerSettings(
            num_updates=spec.agent.num_updates,
            weight_publish_interval=spec.options.weight_publish_interval,
            max_ingest_per_iter=spec.options.max_ingest_per_iter,
            idle_sleep_s=spec.options.idle_sleep_s,
            logging_interval=spec.run.logging_interval,
            save_interval=spec.run.save_interval,
            ragged_ingest=spec.options.ingest == "ragged",
            compile_cpus=compile_cpus(spec, rank),
        ),
        hooks=LearnerHooks(
            collector_steps=control.total_collector_steps,
            collectors_finished=lambda: all(control.collector_steps(i) >= budget for i in indices),
            all_collectors_finished=lambda: all(steps >= budget for steps in control.all_collector_steps()),
            stop_requested=lambda: control.stop_requested,
            on_progress=lambda g, u: control.set_progress(global_step=g, updates=u),
            on_snapshot=lambda snap: offer(stats_queue, snap),
            # Only the run's rank 0 writes checkpoints (another host's local rank 0 does not).
            checkpoint_path=spec.run.layout.checkpoint if learner_rank(spec, rank) == 0 else None,
            checkpoint_extra=lambda g: {
                "collector_steps": control.all_collector_steps(),
                "env_steps": g * iteration_env_steps(spec.topology.num_envs, spec.hosts),
            },
        ),
        process_group=None,
        replay=ReplaySaver(spec.run.replay_path(learner_rank(spec, rank)), spec.run.replay_save_interval_s),
    )


def _destroy_process_group() -> None:
    import torch.distributed as dist

    with contextlib.suppress(Exception):
        dist.destroy_process_group()
