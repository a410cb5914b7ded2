"""Process entry points of the collectors and the learners (keyword arguments only).

Both start inside :func:`~fastsac_async.worker_process.worker_process` (parent-death tie, SIGINT
ignored, log redirect, traceback file) and bind themselves first (CPUs, then memory policy), before
any large allocation.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fastsac_async.collective import Collective, SoloCollective, TorchCollective
from fastsac_async.collector import Collector, CollectorSettings
from fastsac_async.control import Control
from fastsac_async.decider import TrainDecider
from fastsac_async.hosts import (
    actor_digest,
    collector_seed,
    init_host_group,
    learner_rank,
    learner_seed,
    learner_world,
)
from fastsac_async.learner import Learner, LearnerHooks, LearnerSettings
from fastsac_async.profiling import profile_iterations, run_learner_loop
from fastsac_async.spec import (
    EngineSpec,
    IpcRingHandles,
    checkpoint_file,
    collector_name,
    rendezvous_file,
    ring_layout,
)
from fastsac_async.stats import offer
from fastsac_async.worker_process import BootTimeline, record_failure, worker_process
from fastsac_core import FastSACAgent, InferencePolicy, ReplayBuffer, load_checkpoint
from numa_bind import bind_current_process
from shm_transport import (
    CudaIpcProducerHandle,
    CudaIpcRing,
    CudaIpcUnavailable,
    CudaIpcWeightHandle,
    CudaIpcWeightReader,
    CudaIpcWeightWriter,
    HandshakeAborted,
    HostRing,
    HostRingHandle,
    HostWeightReader,
    HostWeightWriter,
    StartupHandshake,
    TransitionRing,
    WeightChannel,
    WeightChannelHandle,
    WeightReader,
    WeightWriter,
)

__all__ = ["collector_settings", "compile_cpus", "run_collector", "run_learner"]

_log = logging.getLogger(__name__)


def _bind(cpus: tuple[int, ...] | None, node: int | None) -> None:
    if cpus is None and node is None:
        return
    result = bind_current_process(cpus=cpus, nodes=None if node is None else [node])
    _log.info("bound to cpus=%s node=%s: %s", cpus, node, result)


def _send(stats_queue: Any, item: object) -> None:
    offer(stats_queue, item)


@contextlib.contextmanager
def _quiet_if_stopped_during_boot(name: str) -> Iterator[None]:
    """A stop request while this worker waits at the boot barrier ends it cleanly (exit 0, no error log)."""
    try:
        yield
    except HandshakeAborted:
        _log.info("%s: stop requested during start-up; exiting", name)


def _reporting_failure(
    control: Control, slot: int, run_dir: Path, name: str
) -> contextlib.AbstractContextManager[None]:
    """Mark and record this worker's failure before it unwinds (a stop during boot is no failure)."""
    return control.reporting_failure(
        slot, record=functools.partial(record_failure, run_dir, name), ignore=(HandshakeAborted,)
    )


def _seed(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)


def collector_settings(spec: EngineSpec, index: int) -> CollectorSettings:
    """The loop knobs of collector ``index`` under ``spec``."""
    return CollectorSettings(
        index=index,
        budget=spec.num_iterations,
        learning_starts=spec.agent.learning_starts,
        resume=spec.resume_from is not None,
        weight_poll_interval=max(1, spec.options.weight_poll_interval),
        idle_sleep_s=spec.options.idle_sleep_s,
        spin_s=spec.options.collector_spin_s,
        stats_interval=max(1, spec.logging_interval),
    )


def run_collector(
    *,
    name: str,
    run_dir: Path,
    parent_pid: int,
    threads: int,
    spec: EngineSpec,
    index: int,
    control: Control,
    handshake: StartupHandshake,
    stats_queue: Any,
) -> None:
    """Collector process: bind, build its env shard and policy (warmed up), receive its slots, collect."""
    with (
        worker_process(name=name, run_dir=run_dir, parent_pid=parent_pid, threads=threads),
        _quiet_if_stopped_during_boot(name),
    ):
        stats_queue.cancel_join_thread()  # never wait on the parent at exit
        boot = BootTimeline(name)
        place = spec.topology.collectors[index]
        _bind(place.cpus, place.numa_node)
        _seed(collector_seed(spec, index))
        # On exit, in reverse: ring, weights, channel, env; a failure is marked before any of it.
        with (
            contextlib.ExitStack() as cleanup,
            _reporting_failure(control, control.collector_slot(index), run_dir, name),
        ):
            env = spec.env_factory(place.env_stop - place.env_start, collector_seed(spec, index))
            cleanup.callback(env.close)
            boot.mark(f"env shard of {env.num_envs} envs built")
            # Build and warm up (compile) the policy while the learner builds its agent: it needs only
            # the dims, not the slots, and the learner's weights replace its random ones before release.
            policy = _warmed_up_policy(spec, index, env.num_envs, boot)
            payload = handshake.receive(
                collector_name(index),
                timeout_s=spec.options.boot_timeout_s,
                should_stop=lambda: control.stop_requested,
            )
            boot.mark("ring and weight slots received from the learner")
            reader: WeightReader
            if isinstance(payload["weights"], CudaIpcWeightHandle):
                reader = CudaIpcWeightReader(payload["weights"])
            else:
                channel = WeightChannel.attach(payload["weights"])
                cleanup.callback(channel.close)
                reader = HostWeightReader(channel)
            cleanup.callback(reader.close)
            ring: TransitionRing
            ring = (
                CudaIpcRing.attach_producer(payload["ring"])
                if isinstance(payload["ring"], CudaIpcProducerHandle)
                else HostRing.attach(payload["ring"])
            )
            cleanup.callback(ring.close)  # closes first: Note [CUDA-IPC teardown order]
            collector = Collector(
                settings=collector_settings(spec, index),
                env=env,
                ring=ring,
                weights=reader,
                policy=policy,
                start_steps=control.collector_steps(index),
                on_steps=lambda steps: control.set_collector_steps(index, steps),
                on_gauges=lambda v, lag, fill: control.set_collector_gauges(
                    index, version=v, lag=lag, ring_fill=fill
                ),
                on_snapshot=lambda snap: _send(stats_queue, snap),
            )
            if not collector.wait_for_weights(
                spec.options.boot_timeout_s, should_stop=lambda: control.stop_requested
            ):
                raise HandshakeAborted(f"{name}: stop requested while waiting for the initial weights")
            boot.mark(f"initial weights loaded (version {collector.version})")
            handshake.report_ready(name)
            handshake.wait_released(
                timeout_s=spec.options.boot_timeout_s, should_stop=lambda: control.stop_requested
            )
            boot.mark("released (every worker ready)")
            collector.run(should_stop=lambda: control.stop_requested)
            _log.info("%s stopped at step %d (version %d)", name, collector.steps, collector.version)


def _warmed_up_policy(spec: EngineSpec, index: int, num_envs: int, boot: BootTimeline) -> InferencePolicy:
    """Collector ``index``'s policy on its inference device, called twice (compiled there on CUDA)."""
    device = torch.device(spec.topology.collectors[index].inference_device)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    compiled = cuda and spec.options.collector_compile
    policy = InferencePolicy(
        spec.dims, spec.agent, device=device, compile=compiled, amp=cuda and spec.options.collector_amp
    )
    for _ in range(2):  # warm-up: first calls compile / allocate
        policy(torch.zeros(num_envs, spec.dims.obs_dim))
    boot.mark(f"policy on {device} built and warmed up (compiled: {compiled})")
    return policy


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
            init_method=f"file://{rendezvous_file(spec.run_dir)}",
            rank=rank,
            world_size=spec.num_learners,
            timeout=datetime.timedelta(seconds=spec.rendezvous_timeout_s),
            device_id=device if device.type == "cuda" else None,
        )
    place = spec.topology.learners[rank]
    # NCCL init may reset the affinity: check it again.
    if place.cpus is not None and os.sched_getaffinity(0) != set(place.cpus):
        _log.warning("CPU affinity changed during process-group init; binding again")
        _bind(place.cpus, None)
    return TorchCollective(device if backend == "nccl" else torch.device("cpu"))


def compile_cpus(spec: EngineSpec, rank: int) -> tuple[int, ...] | None:
    """CPUs learner ``rank`` compiles its first update chunk on: its own and its collectors'.

    None (compile on its own CPUs) unless the learner is pinned and compiles on a GPU (Note
    [compile on borrowed CPUs]).
    """
    place = spec.topology.learners[rank]
    if place.cpus is None or not place.device.startswith("cuda") or not spec.agent.compile:
        return None
    cpus = set(place.cpus)
    for collector in spec.topology.collectors_of(rank):
        cpus.update(collector.cpus or ())
    return tuple(sorted(cpus))


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
    ring_handles: dict[int, HostRingHandle | IpcRingHandles],
    weight_handles: dict[int, WeightChannelHandle],
) -> None:
    """Learner process: bind, join the group, build the agent, ship slots, publish, then learn."""
    with (
        worker_process(name=name, run_dir=run_dir, parent_pid=parent_pid, threads=threads),
        _quiet_if_stopped_during_boot(name),
    ):
        stats_queue.cancel_join_thread()
        boot = BootTimeline(name)
        place = spec.topology.learners[rank]
        _bind(place.cpus, place.numa_node)
        _seed(learner_seed(spec, rank))
        device = torch.device(place.device)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        collective = _init_process_group(spec, rank, device)
        boot.mark(f"on {device}, rank {learner_rank(spec, rank)} of {learner_world(spec)} learner(s)")
        own = spec.topology.collectors_of(rank)
        widths = [c.env_stop - c.env_start for c in own]
        blocks = widths if spec.options.ingest == "ragged" else None
        buffer = ReplayBuffer.of(spec.dims, spec.agent, sum(widths), device=device, blocks=blocks)
        agent = FastSACAgent(spec.dims, spec.agent, device, buffer=buffer, world_size=learner_world(spec))
        start_gstep = start_updates = 0
        if spec.resume_from is not None:
            # Only rank 0 takes the saved RNG state: every rank restoring it would sample the same
            # indices and noise on every rank. The others keep their own seeds.
            extra = load_checkpoint(spec.resume_from, agent, restore_rng=learner_rank(spec, rank) == 0)
            start_gstep = int(extra.get("iteration", 0))
            start_updates = int(extra.get("updates", 0))
        boot.mark(
            "agent and replay buffer built" + (f", resumed at gstep {start_gstep}" if start_gstep else "")
        )
        rings: list[TransitionRing] = []
        writers: list[WeightWriter] = []
        with (
            contextlib.ExitStack() as cleanup,
            _reporting_failure(control, control.learner_slot(rank), run_dir, name),
        ):
            # Runs last on the way out (first registered): the group outlives the rings' teardown.
            if learner_world(spec) > 1:
                cleanup.callback(_destroy_process_group)
            ring_closers: list[Callable[[float], None]] = []
            channels: list[WeightChannel] = []
            cleanup.callback(_close_transport, writers, ring_closers, channels, spec.shutdown_timeout_s)
            payloads: list[tuple[str, dict[str, object]]] = []
            for c in own:
                layout = ring_layout(spec.dims, c.env_stop - c.env_start)
                handle = ring_handles[c.index]
                ring_payload: object = None
                if isinstance(handle, IpcRingHandles):
                    try:
                        ipc = CudaIpcRing.create_consumer(
                            layout, spec.options.ring_capacity, device, handle.cursors
                        )
                        rings.append(ipc)
                        ring_closers.append(functools.partial(_close_ipc_consumer, ipc))
                        ring_payload = ipc.producer_handle()
                    except CudaIpcUnavailable as error:
                        _log.warning(
                            "collector%d: host transition ring instead of CUDA IPC: %s", c.index, error
                        )
                        handle = handle.fallback
                if ring_payload is None:
                    assert isinstance(handle, HostRingHandle)
                    host = HostRing.attach(handle)
                    rings.append(host)
                    ring_closers.append(functools.partial(_close_host_ring, host))
                    ring_payload = handle
                channel = WeightChannel.attach(weight_handles[c.index])
                channels.append(channel)
                weights_payload: object = None
                if c.weight_transport == "cuda_ipc":
                    try:
                        ipc_writer = CudaIpcWeightWriter(channel, device)
                        writers.append(ipc_writer)
                        weights_payload = ipc_writer.reader_handle()
                    except CudaIpcUnavailable as error:
                        _log.warning(
                            "collector%d: host weight channel instead of CUDA IPC: %s", c.index, error
                        )
                if weights_payload is None:
                    writers.append(HostWeightWriter(channel))
                    weights_payload = weight_handles[c.index]
                payloads.append((collector_name(c.index), {"ring": ring_payload, "weights": weights_payload}))
            indices = [c.index for c in own]
            budget = spec.num_iterations
            learner = Learner(
                rank=rank,
                agent=agent,
                rings=rings,
                writers=writers,
                decider=TrainDecider(
                    collective,
                    num_collectors=spec.num_collectors,
                    num_updates=spec.agent.num_updates,
                    learning_starts=spec.agent.learning_starts,
                    utd_mode=spec.options.utd_mode,
                    start_gstep=start_gstep,
                    max_run=spec.agent.num_updates * spec.options.max_ingest_per_iter,
                ),
                settings=LearnerSettings(
                    num_updates=spec.agent.num_updates,
                    weight_publish_interval=spec.options.weight_publish_interval,
                    max_ingest_per_iter=spec.options.max_ingest_per_iter,
                    idle_sleep_s=spec.options.idle_sleep_s,
                    logging_interval=spec.logging_interval,
                    save_interval=spec.save_interval,
                    ragged_ingest=spec.options.ingest == "ragged",
                    compile_cpus=compile_cpus(spec, rank),
                ),
                hooks=LearnerHooks(
                    collector_steps=control.total_collector_steps,
                    collectors_finished=lambda: all(control.collector_steps(i) >= budget for i in indices),
                    all_collectors_finished=lambda: all(
                        steps >= budget for steps in control.all_collector_steps()
                    ),
                    stop_requested=lambda: control.stop_requested,
                    on_progress=lambda g, u: control.set_progress(global_step=g, updates=u),
                    on_snapshot=lambda snap: _send(stats_queue, snap),
                    # Only the run's rank 0 writes checkpoints (another host's local rank 0 does not).
                    checkpoint_path=(lambda g: checkpoint_file(spec.run_dir, g))
                    if learner_rank(spec, rank) == 0
                    else None,
                    checkpoint_extra=lambda g: {"collector_steps": control.all_collector_steps()},
                ),
                process_group=None,
            )
            learner.resume_at(start_gstep, start_updates)
            # Weights first, then the slots: a collector's first poll finds the learner's actor (the
            # checkpoint's, on a resume), never nothing.
            learner.publish(wait=True)
            for collector, payload in payloads:
                handshake.ship(collector, payload)
            boot.mark(f"initial weights published, slots shipped to {len(own)} collector(s)")
            handshake.report_ready(name)
            handshake.wait_released(
                timeout_s=spec.options.boot_timeout_s, should_stop=lambda: control.stop_requested
            )
            boot.mark("released (every worker ready)")
            run_learner_loop(learner, profile=profile_iterations(), name=name)
            final = learner.checkpoint()  # rank 0: the final checkpoint (also after a stop request)
            if final is not None:
                control.set_final_checkpoint(learner.gstep)  # before done: the parent reads it then
            offer(stats_queue, learner.snapshot())
            _log.info(
                "%s done at gstep %d after %d updates (actor %s)",
                name, learner.gstep, learner.updates, actor_digest(agent.flatten_actor_params()),
            )  # fmt: skip
            control.mark_learner_done(rank)
            deadline = time.monotonic() + spec.shutdown_timeout_s
            while not control.learners_released and time.monotonic() < deadline:
                time.sleep(0.02)


def _close_transport(
    writers: list[WeightWriter],
    ring_closers: list[Callable[[float], None]],
    channels: list[WeightChannel],
    timeout_s: float,
) -> None:
    """Close a learner's writers, rings and channels, its rings within one shared deadline.

    A CUDA-IPC consumer waits for its producer (collector) to detach before it frees the slots (Note
    [CUDA-IPC teardown order]); each ring closer gets what is left of one deadline, so a learner's
    teardown is bounded by ``timeout_s`` whatever its ring count.
    """
    for writer in writers:
        writer.close()
    deadline = time.monotonic() + timeout_s
    for close in ring_closers:
        close(max(0.0, deadline - time.monotonic()))
    for channel in channels:
        channel.close()


def _close_ipc_consumer(ring: CudaIpcRing, timeout_s: float) -> None:
    ring.close(timeout_s=timeout_s)


def _close_host_ring(ring: HostRing, timeout_s: float) -> None:
    ring.close()


def _destroy_process_group() -> None:
    import torch.distributed as dist

    with contextlib.suppress(Exception):
        dist.destroy_process_group()
