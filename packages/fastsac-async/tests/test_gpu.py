"""CUDA paths (run on the GPU machine): pinned staging + copy stream, CUDA-IPC rings, NCCL learners."""

import os
import time
from pathlib import Path

import pytest
import torch

from fastsac_async import AsyncOptions, EngineSpec, RunLayout, TrainingRun, run_engine
from fastsac_async.learner.ingest import Ingestor
from fastsac_async.testing import FakeBatchedEnv, FakeEnvFactory, random_collector
from fastsac_async.transport import weight_extras
from fastsac_core import FastSACConfig, ReplayBuffer, step_transition, transition_fields
from fastsac_topology import resolve_trainer_topology
from numa_bind import discover_host
from shm_transport import CudaIpcRing, HostRing, RingCursors, RingLayout

pytestmark = pytest.mark.gpu
OBS, ACT = 5, 2


def _fill(ring: object, env: FakeBatchedEnv, steps: int) -> None:
    obs, cobs = env.reset()
    for _ in range(steps):
        a = env.sample_actions()
        r = env.step(a)
        critic = torch.from_numpy(cobs) if "critic_obs" in ring.layout.names else None  # type: ignore[attr-defined]
        assert ring.push(step_transition(torch.from_numpy(obs), critic, torch.from_numpy(a), r))  # type: ignore[attr-defined]
        obs, cobs = r.obs.copy(), r.critic_obs.copy()


def _contents(buffer: ReplayBuffer) -> list[torch.Tensor]:
    return [t.cpu().nan_to_num(-7.0) for t in buffer.storage.values()]


@pytest.mark.parametrize("ragged", [False, True], ids=["generations", "ragged"])
@pytest.mark.parametrize("shared_obs", [False, True], ids=["own_critic_obs", "critic_observes_obs"])
@pytest.mark.parametrize("kind", ["pinned_host", "cuda_ipc"])
def test_cuda_ingest_equals_cpu_ingest(kind: str, shared_obs: bool, ragged: bool) -> None:
    """Two rings drained into a CUDA replay (pinned staging or IPC D2D) equal the CPU drain (both modes).

    Ragged: ring 0 gets 3 steps per round and ring 1 one, drained with no wait between rounds on the
    pinned path (staging reuse and copy-stream order), and the CUDA replay then samples every env
    from its own written steps.
    """
    critic = None if shared_obs else OBS + 1
    layout = RingLayout.of(3, transition_fields(OBS, critic, ACT))
    cpu_rings = [HostRing.create(layout, 4) for _ in range(2)]
    cursors = [RingCursors.create(4) for _ in range(2)]
    cuda_rings: list[object] = []
    producers: list[CudaIpcRing] = []
    consumers: list[CudaIpcRing] = []
    try:
        if kind == "pinned_host":
            cuda_rings = [HostRing.create(layout, 4) for _ in range(2)]
            producers_like = cuda_rings
        else:
            consumers = [CudaIpcRing.create_consumer(layout, 4, "cuda:0", c.handle) for c in cursors]
            producers = [CudaIpcRing.attach_producer(c.producer_handle()) for c in consumers]
            cuda_rings, producers_like = list(consumers), list(producers)
        blocks = (3, 3) if ragged else None
        cpu_ing = Ingestor(cpu_rings, ReplayBuffer(6, 32, OBS, critic, ACT, blocks=blocks), 4, ragged=ragged)
        gpu_buffer = ReplayBuffer(6, 32, OBS, critic, ACT, device="cuda:0", blocks=blocks)
        gpu_ing = Ingestor(cuda_rings, gpu_buffer, 4, ragged=ragged)  # type: ignore[arg-type]
        steps = (3, 1) if ragged else (3, 3)
        for chunk in range(5):
            for i in range(2):
                _fill(cpu_rings[i], FakeBatchedEnv(3, seed=10 * chunk + i, shared_obs=shared_obs), steps[i])
                _fill(
                    producers_like[i], FakeBatchedEnv(3, seed=10 * chunk + i, shared_obs=shared_obs), steps[i]
                )
            for p in producers:
                p.flush()
            while cpu_ing.drain():
                pass
            while cpu_ing.unread():
                cpu_ing.drain()
            for _ in range(100):
                gpu_ing.drain()
                if gpu_ing.generations == cpu_ing.generations and not gpu_ing.unread():
                    break
            gpu_ing.wait_before_sampling()
            if kind == "cuda_ipc":
                # A consumer publishes its read cursor lazily, once its copy-out event has completed
                # (Note [CUDA-IPC ring ordering]); the next chunk's pushes need that room: publish it now.
                gpu_ing.wait_ingest()
                for c in consumers:
                    c.flush()
        assert gpu_ing.buffer.block_written == cpu_ing.buffer.block_written == ((15, 5) if ragged else (15,))
        assert not gpu_ing.buffer.sample(8).obs.isnan().any(), "samples come only from written steps"
        gpu_ing.wait_ingest()
        for a, b in zip(_contents(cpu_ing.buffer), _contents(gpu_ing.buffer), strict=True):
            assert torch.equal(a, b.to(a.dtype))
    finally:
        for p in producers:
            p.close()
        for r in [*cuda_rings, *cpu_rings]:
            r.close()  # type: ignore[attr-defined]
        for host in [*cpu_rings, *(cuda_rings if kind == "pinned_host" else [])]:
            host.unlink()  # type: ignore[attr-defined]
        for c in cursors:
            c.close()
            c.unlink()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_nccl_learners(tmp_path: Path) -> None:
    """2 collectors with 2 NCCL learners on two GPUs run to their budget and clean up."""
    factory = FakeEnvFactory(step_delay_s=0.001)
    cfg = FastSACConfig(actor_hidden_dim=32, critic_hidden_dim=32, batch_size=16, buffer_size=64,
                        num_updates=2, learning_starts=3)  # fmt: skip
    topo = resolve_trainer_topology(
        num_envs=8, num_collectors=2, num_learners=2, batch_size=16, trainer_device="cuda",
        learner_devices=None, num_cuda_devices=torch.cuda.device_count(), collector_inference_device="cuda",
        cpus_per_collector=None, transition_ipc="auto", weight_ipc="auto", weight_ipc_min_bytes=1 << 24,
        actor_param_bytes=0, host=discover_host(),
    )  # fmt: skip
    run = TrainingRun(env_factory=factory, dims=factory(1, 0).dims, seed=0, num_iterations=40,
                      logging_interval=5, save_interval=0, run_dir=tmp_path)  # fmt: skip
    spec = EngineSpec(run=run, topology=topo, agent=cfg,
                      options=AsyncOptions(num_collectors=2, num_learners=2, ring_capacity=4))  # fmt: skip
    result = run_engine(spec)
    assert result.collector_steps == [40, 40] and result.updates == 2 * (40 - 3 + 1)


def test_a_collector_on_a_cuda_ipc_ring_waits_at_its_lead() -> None:
    """Over CUDA IPC too a collector stops at max_lead unread slots, and steps once one is read."""
    envs, lead = 4, 2
    cfg = FastSACConfig(actor_hidden_dim=16, critic_hidden_dim=16, num_atoms=11, batch_size=8,
                        buffer_size=16, num_updates=1, learning_starts=100, compile=False,
                        cudagraphs=False, amp=False)  # fmt: skip
    env = FakeBatchedEnv(envs, seed=1)
    cursors = RingCursors.create(8)
    consumer = CudaIpcRing.create_consumer(
        RingLayout.of(envs, transition_fields(OBS, OBS + 1, ACT)), 8, "cuda:0", cursors.handle
    )
    producer = CudaIpcRing.attach_producer(consumer.producer_handle())
    try:
        collector = random_collector(env, producer, cfg, max_lead=lead)
        while collector.step_once():
            assert collector.steps <= lead
        assert collector.steps == lead and not collector.step_once()
        producer.flush()
        deadline = time.monotonic() + 10
        read = 0
        while read == 0:
            assert time.monotonic() < deadline, "the pushed slots never became readable"
            read, _ = consumer.read_span(1)
        consumer.commit_reads(read)
        while consumer.read_count < read:  # the read cursor goes out once the read's copy landed
            assert time.monotonic() < deadline, "the read was never published"
        assert collector.step_once() and collector.steps == lead + 1
    finally:
        producer.close()
        consumer.close()
        cursors.close()
        cursors.unlink()


def test_every_slot_of_a_delayed_ipc_copy_reaches_the_replay_before_done() -> None:
    """A collector's last push over CUDA IPC lands in the replay before its learner votes done.

    The producer's copy stream sleeps about a second before the last push's copy, so that push's
    cursor is published late; the learner must not stop with it in flight.
    """
    from fastsac_async.collector.loop import Collector, CollectorSettings
    from fastsac_async.learner.collective import SoloCollective
    from fastsac_async.learner.decider import TrainDecider
    from fastsac_async.learner.loop import Learner, LearnerHooks, LearnerSettings
    from fastsac_core import FastSACAgent, InferencePolicy
    from shm_transport import HostWeightReader, HostWeightWriter, WeightChannel

    budget, envs = 6, 4
    cfg = FastSACConfig(actor_hidden_dim=16, critic_hidden_dim=16, num_atoms=11, batch_size=8,
                        buffer_size=16, num_updates=1, learning_starts=2, compile=False, cudagraphs=False,
                        amp=False)  # fmt: skip
    env = FakeBatchedEnv(envs, seed=1)
    layout = RingLayout.of(envs, transition_fields(OBS, OBS + 1, ACT))
    cursors = RingCursors.create(8)
    consumer = CudaIpcRing.create_consumer(layout, 8, "cuda:0", cursors.handle)
    producer = CudaIpcRing.attach_producer(consumer.producer_handle())
    buffer = ReplayBuffer.of(env.dims, cfg, envs, device="cuda:0", blocks=[envs])
    agent = FastSACAgent(env.dims, cfg, "cuda:0", buffer=buffer)
    extras = weight_extras(env.dims)
    channel = WeightChannel.create(agent.actor_param_numel(), extras)
    try:
        collector = Collector(
            settings=CollectorSettings(index=0, budget=budget, learning_starts=2,
                                       weight_poll_interval=1, idle_sleep_s=0.0, stats_interval=5),
            env=env, ring=producer, weights=HostWeightReader(channel), policy=InferencePolicy(env.dims, cfg),
        )  # fmt: skip
        learner = Learner(
            rank=0, agent=agent, rings=[consumer], writers=[HostWeightWriter(channel)],
            decider=TrainDecider(SoloCollective(), num_collectors=1, num_updates=1, learning_starts=2,
                                 utd_mode="learner_bound"),
            settings=LearnerSettings(num_updates=1, weight_publish_interval=1, max_ingest_per_iter=8,
                                     idle_sleep_s=0.0, logging_interval=5, save_interval=0,
                                     ragged_ingest=True),
            hooks=LearnerHooks(collector_steps=lambda: collector.steps,
                               collectors_finished=lambda: collector.finished, stop_requested=lambda: False),
        )  # fmt: skip
        learner.publish(wait=True)
        push = producer.push

        def delayed_last_push(fields: dict[str, torch.Tensor]) -> bool:
            if collector.steps == budget - 1:
                with torch.cuda.stream(producer._stream):  # type: ignore[arg-type]
                    torch.cuda._sleep(2_000_000_000)  # about a second of GPU cycles before the copy
            return push(fields)

        producer.push = delayed_last_push  # type: ignore[method-assign]
        while not collector.finished:
            collector.step_once()
            learner.run_iteration()
        deadline = time.monotonic() + 30
        while learner.run_iteration():
            assert time.monotonic() < deadline, "the learner never finished"
        assert agent.buffer.block_written == (budget,), "every pushed slot reached the replay"
        assert consumer.size() == 0
    finally:
        producer.close()
        consumer.close()
        channel.close()
        channel.unlink()
        cursors.close()
        cursors.unlink()


@pytest.mark.slow
def test_a_failing_learner_with_cuda_ipc_rings_is_named_within_10_s(tmp_path: Path) -> None:
    """A learner with 4 CUDA-IPC rings raises mid-run: the parent names it within 10 s, nothing left.

    Its teardown waits for its collectors to detach from each ring; the parent must not wait for that.
    """
    from fastsac_async import WorkerFailed
    from fastsac_async.testing import LearnerFaultEnvFactory
    from shm_transport import list_segments

    mark = tmp_path / "failed_at"
    factory = LearnerFaultEnvFactory(step_delay_s=0.001, rank=0, fail_at_update=5, mark_file=str(mark))
    cfg = FastSACConfig(actor_hidden_dim=32, critic_hidden_dim=32, batch_size=16, buffer_size=64,
                        num_updates=2, learning_starts=3, compile=False, cudagraphs=False)  # fmt: skip
    topo = resolve_trainer_topology(
        num_envs=8, num_collectors=4, num_learners=1, batch_size=16, trainer_device="cuda",
        learner_devices=None, num_cuda_devices=1, collector_inference_device="cuda",
        cpus_per_collector=None, transition_ipc="on", weight_ipc="off", weight_ipc_min_bytes=1 << 24,
        actor_param_bytes=0, host=discover_host(),
    )  # fmt: skip
    assert all(c.transition_transport == "cuda_ipc" for c in topo.collectors)
    run = TrainingRun(env_factory=factory, dims=factory(1, 0).dims, seed=0, num_iterations=10**6,
                      logging_interval=5, save_interval=0, run_dir=tmp_path)  # fmt: skip
    spec = EngineSpec(run=run, topology=topo, agent=cfg,
                      options=AsyncOptions(num_collectors=4, ring_capacity=4))  # fmt: skip
    with pytest.raises(WorkerFailed) as info:
        run_engine(spec)
    stopped_after = time.time() - float(mark.read_text())
    assert info.value.worker == "learner0", str(info.value)
    assert "update 5 failed (injected)" in info.value.error_log.read_text()
    assert stopped_after < 10.0, f"stopped {stopped_after:.1f} s after the failure"
    assert "host transition ring instead of CUDA IPC" not in RunLayout(tmp_path).log("learner0").read_text()
    assert not [s for s in list_segments() if s.creator_pid == os.getpid()]
