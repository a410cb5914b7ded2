import contextlib
import dataclasses
import logging
import multiprocessing as mp
import pstats
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fastsac_async import PROFILE_BOOT_ENV
from fastsac_async.collector.loop import Collector
from fastsac_async.collector.process import collector_settings
from fastsac_async.config import AsyncOptions
from fastsac_async.control import Control
from fastsac_async.parent import monitor as monitor_module
from fastsac_async.parent.engine import EngineStats, run_engine
from fastsac_async.parent.monitor import final_checkpoint
from fastsac_async.run_layout import RunLayout
from fastsac_async.spec import EngineSpec, TrainingRun, learner_threads
from fastsac_async.testing import FakeEnvFactory, FirstActionsEnvFactory, cpu_topology
from fastsac_async.worker_process import BootTimeline
from fastsac_core import (
    EnvDims,
    FastSACConfig,
    InferencePolicy,
    ReplayBuffer,
    peek_checkpoint,
    peek_replay,
    save_checkpoint,
    save_replay,
    transition_fields,
)
from fastsac_core.testing import make_agent
from fastsac_topology import LearnerPlacement
from shm_transport import HostRing, RingLayout, default_prefix

CFG = FastSACConfig(
    actor_hidden_dim=16, critic_hidden_dim=16, num_atoms=11, batch_size=16, buffer_size=64,
    num_updates=2, learning_starts=3, compile=False, cudagraphs=False, amp=False,
)  # fmt: skip


def _spec(tmp_path: Path, collectors: int, learners: int, iterations: int) -> EngineSpec:
    factory = FakeEnvFactory(step_delay_s=0.002)
    return EngineSpec(
        run=TrainingRun(env_factory=factory, dims=factory(1, 0).dims, seed=3, num_iterations=iterations,
                        logging_interval=5, save_interval=0, run_dir=tmp_path),
        topology=cpu_topology(num_envs=8, num_collectors=collectors, num_learners=learners, batch_size=16),
        agent=CFG,
        options=AsyncOptions(num_collectors=collectors, num_learners=learners, ring_capacity=4,
                             weight_publish_interval=2, boot_timeout_s=120.0),
        rendezvous_timeout_s=60.0,
    )  # fmt: skip


def _with_run(spec: EngineSpec, **changes: Any) -> EngineSpec:
    """``spec`` with ``changes`` to its :class:`TrainingRun`."""
    return dataclasses.replace(spec, run=dataclasses.replace(spec.run, **changes))


@pytest.mark.slow
@pytest.mark.parametrize("ingest", ["generations", "ragged"])
@pytest.mark.parametrize("learners", [1, 2])
def test_engine_runs_to_its_budget_and_cleans_up(
    tmp_path: Path, learners: int, ingest: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 collectors, 1 or 2 (gloo) learners, either ingest, a lead below the ring: budget, updates, clean end.

    The lead is 1 under generations, which waits for every collector's step: no collector may starve it.
    """
    monkeypatch.setenv(PROFILE_BOOT_ENV, "1")  # and each worker's boot profile, checked below
    ticks: list[EngineStats] = []
    boot: list[tuple[str, str]] = []
    collectors = 4 if ingest == "ragged" and learners == 2 else 2  # ragged: 2 env blocks on every rank
    spec = _spec(tmp_path, collectors, learners, 40)
    lead = 1 if ingest == "generations" else 2
    spec = dataclasses.replace(spec, options=dataclasses.replace(spec.options, ingest=ingest, max_lead=lead))
    assert collector_settings(spec, 0).max_lead == lead
    result = run_engine(spec, ticks.append, lambda w, s: boot.append((w, s)))
    assert result.collector_steps == [40] * collectors
    assert result.global_step == 40
    assert result.updates == 2 * (40 - 3 + 1)
    assert not result.stopped_early and result.stop_reason == "completed"
    assert ticks, "learner 0 reported"
    last = ticks[-1]
    assert max((s.weight_version for t in ticks for s in t.collectors.values()), default=0) > 0
    assert set(last.learners) == set(range(learners))
    names = {w for w, _ in boot}
    assert names == {f"collector{i}" for i in range(collectors)} | {f"learner{r}" for r in range(learners)}
    # Every worker is announced before the first one is spawned: the console's total is right from the start.
    assert [s for _, s in boot[: len(names)]] == ["waiting"] * len(names)
    assert result.last_checkpoint is not None
    extra = peek_checkpoint(result.last_checkpoint)["extra"]
    assert extra["collector_steps"] == [40] * collectors and extra["iteration"] == 40
    # Each worker's log says where its start-up time went.
    learner_log = RunLayout(tmp_path).log("learner0").read_text()
    allocated = f"learner0 boot: replay buffer of {8 // learners * 64} transitions allocated on cpu in"
    assert allocated in learner_log
    assert "learner0 boot: agent built in" in learner_log
    assert "learner0 boot: released (every worker ready)" in learner_log
    assert re.search(
        r"learner0: first update chunk \(2 updates, compile and capture included\) took \S+ s on \d+ CPUs",
        learner_log,
    )
    collector_log = RunLayout(tmp_path).log("collector1").read_text()
    shard = f"env shard of {8 // collectors} envs built"
    assert f"collector1 boot: {shard} in" in collector_log
    phases = re.findall(r"collector1 boot: (.*) in \S+ s \(", collector_log)
    assert phases == [
        shard,
        "policy on cpu built and warmed up (compiled: False)",
        "ring and weight slots received from the learner",
        "initial weights loaded (version 1)",
        "released (every worker ready)",
    ], "the policy warms up before the slots arrive"
    # FASTSAC_PROFILE_BOOT: each worker's start-up under cProfile, up to its release.
    layout = RunLayout(tmp_path)
    learner_boot = pstats.Stats(str(layout.boot_profile("learner0")))
    profiled = {func[2] for func in learner_boot.stats}  # type: ignore[attr-defined]
    assert "_agent" in profiled, "the learner's agent build is in its boot profile"
    assert "run_learner_loop" not in profiled, "the profile ends at the release, before training"
    workers = [f"collector{i}" for i in range(collectors)] + [f"learner{r}" for r in range(learners)]
    assert all(layout.boot_profile(worker).is_file() for worker in workers)
    assert "learner0 boot profile: " in learner_log


@pytest.mark.slow
def test_once_every_worker_is_ready_the_run_has_no_name_left_in_dev_shm(tmp_path: Path) -> None:
    """After boot the run's segments and semaphores are unlinked: its workers map them as deleted files."""
    mapped: list[str] = []

    def on_stats(stats: EngineStats) -> None:  # every tick comes after the boot
        for log in [] if mapped else RunLayout(tmp_path).logs.glob("*.log"):
            for pid in re.findall(r"started \(pid (\d+)", log.read_text()):
                # A worker done with its steps has exited (before the open, or between it and the read).
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
                    mapped.extend(line.split("/dev/shm/", 1)[1] for line in maps if "/dev/shm/" in line)

    run_engine(_spec(tmp_path, 2, 1, 20), on_stats)
    assert any(name.startswith("sem.") for name in mapped), mapped  # its queues' and handshake's
    assert all(name.endswith(" (deleted)") for name in mapped), mapped


@pytest.mark.slow
def test_time_limit_stops_the_run_and_says_so(tmp_path: Path) -> None:
    """time_limit_s ends an unbounded run early, with stop_reason "time_limit" and a final checkpoint."""
    spec = _with_run(_spec(tmp_path, 1, 1, 10**9), time_limit_s=2.0)
    result = run_engine(spec)
    assert result.stopped_early and result.stop_reason == "time_limit"
    assert 0 < result.global_step < 10**9 and result.last_checkpoint is not None


@pytest.mark.slow
def test_cuda_ipc_planned_but_unavailable_falls_back_to_host(tmp_path: Path) -> None:
    """A collector planned on CUDA-IPC rings and weights runs on the host transport when IPC fails."""
    spec = _spec(tmp_path, 2, 1, 12)
    ipc = tuple(
        dataclasses.replace(c, transition_transport="cuda_ipc", weight_transport="cuda_ipc")
        for c in spec.topology.collectors
    )
    spec = dataclasses.replace(spec, topology=dataclasses.replace(spec.topology, collectors=ipc))
    ticks: list[EngineStats] = []
    result = run_engine(spec, ticks.append)  # no CUDA here: every IPC setup raises CudaIpcUnavailable
    assert result.collector_steps == [12, 12] and result.updates == 2 * (12 - 3 + 1)
    assert max((s.weight_version for t in ticks for s in t.collectors.values()), default=0) > 0
    log = RunLayout(tmp_path).log("learner0").read_text()
    assert (
        "host transition ring instead of CUDA IPC" in log and "host weight channel instead of CUDA IPC" in log
    )


@pytest.mark.slow
def test_engine_sweeps_segments_of_dead_runs(tmp_path: Path) -> None:
    """A segment left named by a dead parent (killed during boot) is removed when the next run starts."""
    probe = subprocess.Popen(["true"])  # its pid is dead once it exits
    probe.wait()
    stale = Path(f"/dev/shm/{default_prefix()}{probe.pid}-deadbeef")
    stale.write_bytes(b"\0" * 64)
    try:
        run_engine(_spec(tmp_path, 1, 1, 4))
        assert not stale.exists()
    finally:
        stale.unlink(missing_ok=True)


def test_learner_threads_default_to_one_on_cuda_and_to_the_pinned_cpus_elsewhere(tmp_path: Path) -> None:
    """Auto threads: 1 for a CUDA learner, its pinned CPU count (2 unpinned) on CPU; a set value wins."""
    spec = _spec(tmp_path, 1, 1, 10)
    cuda = LearnerPlacement(rank=0, device="cuda:0", numa_node=None, cpus=(0, 1))
    pinned = LearnerPlacement(rank=0, device="cpu", numa_node=None, cpus=(0, 1, 2))
    unpinned = LearnerPlacement(rank=0, device="cpu", numa_node=None, cpus=None)
    assert [learner_threads(spec, p) for p in (cuda, pinned, unpinned)] == [1, 3, 2]
    fixed = dataclasses.replace(spec, learner_threads=4)
    assert [learner_threads(fixed, p) for p in (cuda, pinned, unpinned)] == [4, 4, 4]


def test_collector_settings_follow_the_spec(tmp_path: Path) -> None:
    """A collector's loop knobs come from the spec: budget, learning_starts, sleep and spin."""
    spec = _spec(tmp_path, 2, 1, 40)
    spec = dataclasses.replace(
        spec, options=dataclasses.replace(spec.options, collector_spin_s=0.003, idle_sleep_s=0.002)
    )
    settings = collector_settings(spec, 1)
    assert (settings.index, settings.budget, settings.learning_starts) == (1, 40, 3)
    assert (settings.spin_s, settings.idle_sleep_s, settings.stats_interval) == (0.003, 0.002, 5)


def test_a_collector_resumed_before_learning_starts_acts_at_random_until_then(tmp_path: Path) -> None:
    """Resumed at step 1 of learning_starts=3, a collector's steps 1 and 2 are random, step 3 the policy's."""
    spec = _with_run(_spec(tmp_path, 1, 1, 40), resume_from=tmp_path / "model.pt")
    env = FakeEnvFactory()(4, 0)
    random_steps: list[int] = []
    sample = env.sample_actions

    def recorded() -> np.ndarray:
        random_steps.append(collector.steps)
        return sample()

    env.sample_actions = recorded  # type: ignore[method-assign]
    ring = HostRing.create(RingLayout.of(4, transition_fields(*_ring_dims(env.dims))), 8)
    try:
        collector = Collector(
            settings=collector_settings(spec, 0), env=env, ring=ring, weights=None,
            policy=InferencePolicy(env.dims, CFG), start_steps=1,
        )  # fmt: skip
        for _ in range(3):
            assert collector.step_once()
    finally:
        ring.close()
        ring.unlink()
    assert random_steps == [1, 2], "steps before learning_starts are random, counted from the run's start"


def _ring_dims(dims: EnvDims) -> tuple[int, int | None, int]:
    return dims.obs_dim, dims.stored_critic_obs_dim, dims.act_dim


def test_the_final_checkpoint_comes_from_control_even_if_its_snapshot_is_late(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Done learners: the result names learner 0's final checkpoint, its snapshot late, dropped or not."""
    control = Control(num_collectors=1, num_learners=1)
    final = str(RunLayout(tmp_path).checkpoint(37))
    reported: list[str] = [str(RunLayout(tmp_path).checkpoint(20))]
    calls: list[int] = []

    def forward_late() -> None:  # the final snapshot reaches the queue on the third look
        calls.append(1)
        if len(calls) == 3:
            reported.append(final)

    assert final_checkpoint(tmp_path, control, reported, forward_late) == reported[-1]  # none recorded yet
    assert not calls
    control.set_final_checkpoint(37)
    assert final_checkpoint(tmp_path, control, reported, forward_late) == final
    assert len(calls) == 3
    monkeypatch.setattr(monitor_module, "_FINAL_SNAPSHOT_WAIT_S", 0.05)
    lost: list[str] = []
    assert final_checkpoint(tmp_path, control, lost, lambda: None) == final  # a dropped snapshot


@pytest.mark.slow
@pytest.mark.parametrize("learners", [1, 2])
def test_a_run_resumed_from_uneven_collector_steps_finishes(tmp_path: Path, learners: int) -> None:
    """A resume from uneven collector steps (as a stop leaves them) finishes and continues the count.

    Each learner rank (2: gloo) restores its own replay shard, and its final shard holds it and the
    steps collected after.
    """
    spec = _spec(tmp_path / "resumed", 2, learners, 12)
    per_rank = 8 // learners
    agent = make_agent(spec.run.dims, CFG, "cpu", num_envs=per_rank, world_size=learners)
    saved = save_checkpoint(
        RunLayout(tmp_path / "stopped").checkpoint(5), agent,
        extra={"iteration": 5, "updates": 6, "collector_steps": [4, 7]},  # collector 1 was 3 steps ahead
    )  # fmt: skip
    dims, stored = spec.run.dims, [5, 3][:learners]  # steps each rank's shard holds
    for rank, steps in enumerate(stored):
        shard = ReplayBuffer.of(dims, CFG, per_rank)
        fields = transition_fields(dims.obs_dim, dims.stored_critic_obs_dim, dims.act_dim)
        shard.extend_batch(
            {
                name: torch.zeros(steps, per_rank, *shape, dtype=dtype)
                for name, (shape, dtype) in fields.items()
            }
        )
        save_replay(RunLayout(tmp_path / "stopped").replay(rank), shard.snapshot(), gstep=5)
    spec = _with_run(spec, resume_from=saved, time_limit_s=120.0)  # a hang ends as a failure
    result = run_engine(spec)
    for rank, steps in enumerate(stored):
        log = RunLayout(tmp_path / "resumed").log(f"learner{rank}").read_text()
        source = RunLayout(tmp_path / "stopped").replay(rank)
        assert f"learner{rank}: replay buffer restored from {source}: {per_rank * steps} transitions" in log
        final = peek_replay(RunLayout(tmp_path / "resumed").replay(rank))
        assert (final.gstep, final.transitions) == (12, per_rank * (steps + 12 - 5))
    assert result.stop_reason == "completed"
    assert result.collector_steps == [12, 12] and result.global_step == 12
    assert result.updates == 6 + 2 * (12 - 5)  # strict: num_updates per gstep after the resume point
    assert result.last_checkpoint is not None
    extra = peek_checkpoint(result.last_checkpoint)["extra"]
    assert (extra["iteration"], extra["updates"], extra["collector_steps"]) == (12, 20, [12, 12])


@pytest.mark.slow
def test_a_stop_during_start_up_ends_cleanly_and_says_so(tmp_path: Path) -> None:
    """Ctrl+C while workers boot: stop_reason "stopped_during_boot", no checkpoint, no worker error log."""
    booted: list[tuple[str, str]] = []
    result = run_engine(
        _spec(tmp_path, 2, 1, 10**9), on_boot=lambda w, s: booted.append((w, s)), should_stop=lambda: True
    )
    assert result.stopped_early and result.stop_reason == "stopped_during_boot"
    assert result.last_checkpoint is None and result.updates == 0
    assert ("collector1", "booting") in booted and not any(s == "running" for _, s in booted)
    assert not RunLayout(tmp_path).errors.exists(), "a worker stopped at the barrier is no failure"


def _join_alone(path: str) -> None:
    """Rank 0 of a 2-rank group whose rank 1 never comes: leaves its entries in the file rendezvous."""
    import datetime

    import torch.distributed as dist

    with contextlib.suppress(Exception):  # the rendezvous times out, as a run killed at boot would leave it
        dist.init_process_group(
            "gloo", init_method=f"file://{path}", rank=0, world_size=2, timeout=datetime.timedelta(seconds=3)
        )


@pytest.mark.slow
def test_a_stale_rendezvous_file_does_not_break_the_next_two_learner_run(tmp_path: Path) -> None:
    """The file rendezvous a dead group left in the run folder is removed before the learners join."""
    stale = RunLayout(tmp_path).rendezvous
    proc = mp.get_context("spawn").Process(target=_join_alone, args=(str(stale),))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0 and stale.exists()
    spec = _with_run(
        dataclasses.replace(_spec(tmp_path, 2, 2, 12), rendezvous_timeout_s=30.0), time_limit_s=120.0
    )
    result = run_engine(spec)
    assert result.stop_reason == "completed" and result.collector_steps == [12, 12]


@pytest.mark.slow
def test_resumed_collectors_act_with_the_checkpoints_actor_from_their_first_step(tmp_path: Path) -> None:
    """On a resume every collector's first action comes from the checkpoint's actor, not a random one.

    The checkpoint's actor saturates every action at +1 (a large mean bias on the heads, which start
    at zero weights, and the smallest spread); a random-initialised actor's actions straddle 0.
    """
    factory = FirstActionsEnvFactory(folder=str(tmp_path))
    spec = _with_run(_spec(tmp_path / "run", 2, 1, 40), env_factory=factory)
    agent = make_agent(spec.run.dims, CFG, "cpu", num_envs=8)
    with torch.no_grad():
        agent.model.actor.fc_mean.bias.fill_(20.0)
        agent.model.actor.fc_log_std.bias.fill_(-20.0)
    saved = save_checkpoint(
        RunLayout(tmp_path / "stopped").checkpoint(5), agent,
        extra={"iteration": 5, "updates": 6, "collector_steps": [5, 5]},
    )  # fmt: skip
    run_engine(_with_run(spec, resume_from=saved, time_limit_s=120.0))
    for seed in (spec.run.seed, spec.run.seed + 1):
        first = np.load(tmp_path / f"first_actions_{seed}.npy")
        assert first.shape == (4, 2) and (first > 0.99).all(), first


def test_a_start_up_that_ends_before_its_release_still_writes_its_boot_profile(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A boot profile whose start-up fails before the release is written at close, marked incomplete."""
    path = tmp_path / "learner0.boot.prof"
    boot = BootTimeline("learner0", profile_to=path)
    boot.mark("something built")
    with caplog.at_level(logging.INFO, logger="fastsac_async.worker_process"):
        boot.close()
        boot.close()  # once written, a second close writes nothing more
    assert "mark" in {func[2] for func in pstats.Stats(str(path)).stats}  # type: ignore[attr-defined]
    lines = [r.getMessage() for r in caplog.records if "boot profile" in r.getMessage()]
    assert lines == [f"learner0 boot profile: {path} (incomplete: the start-up ended before its release) "
                     "(read it with python -m pstats)"]  # fmt: skip
