"""The collector process: bound and seeded, then its env shard, policy, ring and weights; collect.

The policy is built and warmed up while the learner builds its agent; the ring and the weight reader
open from the handles the learner ships (Note [transport by name] in ``fastsac_async.transport``).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import torch

from fastsac_async.collector.loop import Collector, CollectorSettings
from fastsac_async.control import Control
from fastsac_async.hosts import collector_seed
from fastsac_async.spec import EngineSpec
from fastsac_async.stats import offer
from fastsac_async.transport import CollectorPayload
from fastsac_async.worker_process import BootTimeline, collector_name, reporting_failure, worker_boot
from fastsac_core import InferencePolicy
from shm_transport import HandshakeAborted, StartupHandshake

__all__ = ["collector_settings", "run_collector"]

_log = logging.getLogger(__name__)


def collector_settings(spec: EngineSpec, index: int) -> CollectorSettings:
    """The loop knobs of collector ``index`` under ``spec``."""
    return CollectorSettings(
        index=index,
        budget=spec.run.num_iterations,
        learning_starts=spec.agent.learning_starts,
        weight_poll_interval=max(1, spec.options.weight_poll_interval),
        idle_sleep_s=spec.options.idle_sleep_s,
        spin_s=spec.options.collector_spin_s,
        stats_interval=max(1, spec.run.logging_interval),
        max_lead=spec.options.collector_lead(),
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
    place = spec.topology.collectors[index]
    # On exit, in reverse: ring, weights, env; a failure is marked before any of it.
    with (
        worker_boot(
            name=name, run_dir=run_dir, parent_pid=parent_pid, threads=threads, cpus=place.cpus,
            node=place.numa_node, seed_value=collector_seed(spec, index), stats_queue=stats_queue,
        ) as boot,
        contextlib.ExitStack() as cleanup,
        reporting_failure(control, control.collector_slot(index), run_dir, name),
    ):  # fmt: skip
        env = spec.run.env_factory(place.env_stop - place.env_start, collector_seed(spec, index))
        cleanup.callback(env.close)
        boot.mark(f"env shard of {env.num_envs} envs built")
        # Build and warm up (compile) the policy while the learner builds its agent: it needs only
        # the dims, not the slots, and the learner's weights replace its random ones before release.
        policy = _warmed_up_policy(spec, index, env.num_envs, boot)
        payload: CollectorPayload = handshake.receive(
            collector_name(index),
            timeout_s=spec.options.boot_timeout_s,
            should_stop=lambda: control.stop_requested,
        )
        boot.mark("ring and weight slots received from the learner")
        reader = payload.weights.open_reader()
        cleanup.callback(reader.close)
        ring = payload.ring.open_producer()
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
            on_snapshot=lambda snap: offer(stats_queue, snap),
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
        boot.released()
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
        spec.run.dims, spec.agent, device=device, compile=compiled, amp=cuda and spec.options.collector_amp
    )
    for _ in range(2):  # warm-up: first calls compile / allocate
        policy(torch.zeros(num_envs, spec.run.dims.obs_dim))
    boot.mark(f"policy on {device} built and warmed up (compiled: {compiled})")
    return policy
