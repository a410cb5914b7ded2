import dataclasses
import logging
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from fastsac_async.collector import loop as collector_module
from fastsac_async.collector.loop import Collector, CollectorSettings
from fastsac_async.exceptions import AsyncConfigError
from fastsac_async.learner.collective import SoloCollective
from fastsac_async.learner.decider import TrainDecider
from fastsac_async.learner.ingest import Ingestor
from fastsac_async.learner.loop import Learner, LearnerHooks, LearnerSettings, run_learner_loop
from fastsac_async.learner.profiler import (
    PROFILE_AFTER_UPDATES,
    PROFILE_ENV,
    ProfileWindow,
    profile_iterations,
    profile_window,
)
from fastsac_async.stats import LearnerSnapshot
from fastsac_async.testing import FailingEnvFactory, FakeBatchedEnv, random_collector
from fastsac_async.transport import weight_extras
from fastsac_core import (
    FastSACAgent,
    FastSACConfig,
    InferencePolicy,
    ReplayBuffer,
    ReplaySaver,
    load_replay,
    peek_checkpoint,
    peek_replay,
    step_transition,
    transition_fields,
)
from fastsac_core.testing import make_agent
from shm_transport import HostRing, HostWeightReader, HostWeightWriter, RingLayout, WeightChannel

OBS, ACT = 5, 2
CFG = FastSACConfig(
    actor_hidden_dim=16, critic_hidden_dim=16, num_atoms=11, batch_size=32, buffer_size=64,
    num_updates=2, learning_starts=2, compile=False, cudagraphs=False, amp=False,
)  # fmt: skip


class Rings:
    """Host rings created in-process (unlinked at teardown)."""

    def __init__(self) -> None:
        self.rings: list[HostRing] = []

    def make(self, num_envs: int, capacity: int, *, shared_obs: bool = False) -> HostRing:
        critic = None if shared_obs else OBS + 1
        ring = HostRing.create(RingLayout.of(num_envs, transition_fields(OBS, critic, ACT)), capacity)
        self.rings.append(ring)
        return ring

    def close(self) -> None:
        for ring in self.rings:
            ring.close()
            ring.unlink()


@pytest.fixture
def rings() -> Iterator[Rings]:
    r = Rings()
    yield r
    r.close()


def _push_steps(env: FakeBatchedEnv, ring: HostRing, steps: int) -> None:
    obs, cobs = env.reset()
    for _ in range(steps):
        actions = env.sample_actions()
        res = env.step(actions)
        critic = torch.from_numpy(cobs) if "critic_obs" in ring.layout.names else None
        ok = ring.push(step_transition(torch.from_numpy(obs), critic, torch.from_numpy(actions), res))
        assert ok
        obs, cobs = res.obs.copy(), res.critic_obs.copy()


def _buffer(num_envs: int, *, shared_obs: bool = False) -> ReplayBuffer:
    return ReplayBuffer(num_envs, 64, OBS, None if shared_obs else OBS + 1, ACT)


def _storage(buffer: ReplayBuffer) -> list[torch.Tensor]:
    return list(buffer.storage.values())


@pytest.mark.parametrize("ragged", [False, True], ids=["generations", "ragged"])
@pytest.mark.parametrize("shared_obs", [False, True], ids=["own_critic_obs", "critic_observes_obs"])
def test_sharded_rings_fill_the_replay_exactly_like_one_full_ring(
    rings: Rings, shared_obs: bool, ragged: bool
) -> None:
    """Three 2-env rings, merged by generation or ingested per block, leave one 6-env ring's bytes."""
    steps, shards = 20, 3
    full_env = FakeBatchedEnv(6, seed=0, shared_obs=shared_obs)
    full_ring = rings.make(6, 32, shared_obs=shared_obs)
    _push_steps(full_env, full_ring, steps)
    # The same envs split into blocks: env block i of the full env == shard i (obs encode env index).
    shard_rings = [rings.make(2, 8, shared_obs=shared_obs) for _ in range(shards)]
    one = Ingestor([full_ring], _buffer(6, shared_obs=shared_obs), max_ingest_per_iter=5)
    blocks = (2, 2, 2) if ragged else None
    many_buffer = ReplayBuffer(6, 64, OBS, None if shared_obs else OBS + 1, ACT, blocks=blocks)
    many = Ingestor(shard_rings, many_buffer, max_ingest_per_iter=3, ragged=ragged)
    while one.drain():
        pass
    # Shards: replay the full ring's slots into the shard rings, interleaved unevenly.
    full_src = HostRing.attach(full_ring.handle)
    try:
        pushed = [0] * shards
        # Rebuild the data from the already-ingested single buffer (ground truth) slot by slot.
        truth = one.buffer.storage
        order = [0, 0, 1, 2, 2, 2, 1, 0] * 20
        for i in order:
            if pushed[i] >= steps:
                continue
            t = pushed[i]
            lo, hi = 2 * i, 2 * i + 2
            ok = shard_rings[i].push({name: truth[name][t, lo:hi] for name in shard_rings[i].layout.names})
            if ok:
                pushed[i] += 1
            many.drain()
        while many.drain() or many.held():
            many.drain()
    finally:
        full_src.close()
    assert pushed == [steps] * shards
    assert one.generations == many.generations == steps
    for a, b in zip(_storage(one.buffer), _storage(many.buffer), strict=True):
        assert torch.equal(a.nan_to_num(-7.0), b.nan_to_num(-7.0))


def test_ragged_ingest_never_holds_a_fast_ring_for_a_stalled_one(rings: Rings) -> None:
    """Ragged: the fast rings are emptied into their own blocks; the silent ring's block just waits."""
    fast, slow = [rings.make(2, 4) for _ in range(2)], rings.make(2, 4)
    buffer = ReplayBuffer(6, 64, OBS, OBS + 1, ACT, blocks=(2, 2, 2))
    ing = Ingestor([fast[0], slow, fast[1]], buffer, max_ingest_per_iter=8, ragged=True)
    envs = [FakeBatchedEnv(2, seed=s) for s in range(3)]
    for env, ring in zip([envs[0], envs[2]], fast, strict=True):
        _push_steps(env, ring, 4)
    assert ing.drain() == 0, "no env gained a step while the silent block has none"
    assert all(r.size() == 0 for r in fast), "the fast rings' slots are committed at once"
    assert buffer.block_written == (4, 0, 4) and ing.held() == 0
    _push_steps(envs[1], slow, 3)
    assert ing.drain() == 3 and buffer.block_written == (4, 3, 4)
    assert buffer.storage["obs"][2, 2:4, 0].tolist() == [1.0, 1.0], (
        "the slow ring's shard sits in env block 1"
    )


def test_ragged_ingest_needs_one_block_per_ring(rings: Rings) -> None:
    """A buffer whose blocks do not match the rings is refused, naming both."""
    with pytest.raises(ValueError, match=r"one env block per ring, \[2, 2\]; it has blocks \[4\]"):
        Ingestor([rings.make(2, 4), rings.make(2, 4)], _buffer(4), max_ingest_per_iter=4, ragged=True)


def test_a_stalled_ring_delays_only_its_generations(rings: Rings) -> None:
    """A silent ring holds back ingestion; the others fill up; nothing is lost once it resumes."""
    fast = [rings.make(2, 4) for _ in range(2)]
    slow = rings.make(2, 4)
    ing = Ingestor([fast[0], slow, fast[1]], _buffer(6), max_ingest_per_iter=8)
    envs = [FakeBatchedEnv(2, seed=s) for s in range(3)]
    for env, ring in zip([envs[0], envs[2]], fast, strict=True):
        _push_steps(env, ring, 4)
        assert ring.is_full()
    assert ing.drain() == 0
    assert all(r.is_full() for r in fast), "held slots are not committed: producers stay back-pressured"
    assert len(ing.buffer) == 0
    _push_steps(envs[1], slow, 3)
    assert ing.drain() == 3
    assert len(ing.buffer) == 3
    assert all(r.size() == 1 for r in fast) and slow.size() == 0
    assert ing.buffer.storage["obs"][2, 2:4, 0].tolist() == [1.0, 1.0], (
        "slow ring's shard sits in env block 1"
    )


def _agent(num_envs: int, *, shared_obs: bool = False) -> FastSACAgent:
    return make_agent(FakeBatchedEnv(1, 0, shared_obs=shared_obs).dims, CFG, "cpu", num_envs=num_envs)


@contextmanager
def _in_process_pair(
    rings: Rings,
    *,
    shared_obs: bool = False,
    compile_cpus: tuple[int, ...] | None = None,
    replay: ReplaySaver | None = None,
) -> Iterator[tuple[Collector, Learner, list[LearnerSnapshot]]]:
    """One collector (budget 12) and one strict learner over one host ring and one weight channel."""
    ring = rings.make(4, 8, shared_obs=shared_obs)
    agent = _agent(4, shared_obs=shared_obs)
    extras = weight_extras(agent.dims)
    channel = WeightChannel.create(agent.actor_param_numel(), extras)
    try:
        env = FakeBatchedEnv(4, seed=1, shared_obs=shared_obs)
        collector = Collector(
            settings=CollectorSettings(index=0, budget=12, learning_starts=2,
                                       weight_poll_interval=1, idle_sleep_s=0.0, stats_interval=5),
            env=env, ring=ring, weights=HostWeightReader(channel),
            policy=InferencePolicy(env.dims, CFG),
        )  # fmt: skip
        snaps: list[LearnerSnapshot] = []
        learner = Learner(
            rank=0, agent=agent, rings=[ring], writers=[HostWeightWriter(channel)],
            decider=TrainDecider(SoloCollective(), num_collectors=1, num_updates=2, learning_starts=2,
                                 utd_mode="strict"),
            settings=LearnerSettings(num_updates=2, weight_publish_interval=2, max_ingest_per_iter=4,
                                     idle_sleep_s=0.0, logging_interval=5, save_interval=0,
                                     compile_cpus=compile_cpus),
            hooks=LearnerHooks(collector_steps=lambda: collector.steps,
                               collectors_finished=lambda: collector.finished,
                               stop_requested=lambda: False, on_snapshot=snaps.append),
            replay=replay,
        )  # fmt: skip
        learner.publish()
        yield collector, learner, snaps
    finally:
        channel.close()
        channel.unlink()


def test_a_stop_ingests_every_pushed_slot_and_its_checkpoint_keeps_the_updates_owed(
    rings: Rings, tmp_path: Path
) -> None:
    """A stop behind its collector: every pushed slot reaches the buffer, the checkpoint holds the debt."""
    ring = rings.make(4, 16)
    agent = _agent(4)
    stop = [False]
    env = FakeBatchedEnv(4, seed=1)
    collector = Collector(
        settings=CollectorSettings(index=0, budget=10**6, learning_starts=2, weight_poll_interval=1,
                                   idle_sleep_s=0.0, stats_interval=5),
        env=env, ring=ring, weights=None, policy=InferencePolicy(env.dims, CFG),
    )  # fmt: skip
    learner = Learner(
        rank=0, agent=agent, rings=[ring], writers=[],
        decider=TrainDecider(SoloCollective(), num_collectors=1, num_updates=2, learning_starts=2,
                             utd_mode="strict", max_run=4),
        settings=LearnerSettings(num_updates=2, weight_publish_interval=2, max_ingest_per_iter=2,
                                 idle_sleep_s=0.0, logging_interval=5, save_interval=0),
        hooks=LearnerHooks(collector_steps=lambda: collector.steps, collectors_finished=lambda: False,
                           stop_requested=lambda: stop[0],
                           checkpoint_path=lambda gstep: tmp_path / f"model_{gstep}.pt"),
    )  # fmt: skip
    for _ in range(10):  # the collector fills its ring; the learner, held by its debt, falls behind
        while collector.step_once():
            pass
        learner.run_iteration()
    stop[0] = True
    assert not learner.run_iteration()
    assert learner.decider.owed > 0, "the learner was behind when it stopped"
    assert (learner.gstep, agent.buffer.written) == (collector.steps, collector.steps)
    checkpoint = learner.checkpoint()
    assert checkpoint is not None
    assert peek_checkpoint(checkpoint)["extra"]["owed_updates"] == learner.decider.owed


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to lend one")
def test_only_the_first_update_chunk_runs_on_the_lent_cpus(rings: Rings) -> None:
    """The chunk that compiles runs on the learner's and its collectors' CPUs; later chunks on its own."""
    cpus = sorted(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpus[0]})
    try:
        with _in_process_pair(rings, compile_cpus=(cpus[1],)) as (collector, learner, _):
            seen: list[set[int]] = []
            update = learner.agent.update

            def recording_update(num_updates: int) -> dict[str, torch.Tensor]:
                seen.append(os.sched_getaffinity(0))
                return update(num_updates)

            learner.agent.update = recording_update  # type: ignore[method-assign]
            for _ in range(200):
                collector.step_once()
                if not learner.run_iteration() or len(seen) >= 3:
                    break
        assert len(seen) >= 3
        assert seen[0] == {cpus[0], cpus[1]} and all(s == {cpus[0]} for s in seen[1:])
        assert os.sched_getaffinity(0) == {cpus[0]}
    finally:
        os.sched_setaffinity(0, before)


@pytest.mark.parametrize("shared_obs", [False, True], ids=["own_critic_obs", "critic_observes_obs"])
def test_collector_and_learner_in_process(rings: Rings, shared_obs: bool) -> None:
    """Driven in one process: steps advance, updates run, weights reach the collector with a version."""
    with _in_process_pair(rings, shared_obs=shared_obs) as (collector, learner, snaps):
        for _ in range(200):
            collector.step_once()
            collector.step_once()
            if not learner.run_iteration():
                break
        assert learner.stopped and collector.finished
        assert learner.ingestor.generations == 12
        assert learner.updates == 2 * (12 - 2 + 1)
        assert collector.version > 1 and collector.lag >= 0
        assert snaps and snaps[-1].updates == learner.updates
        first = collector.snapshot()
        assert collector.snapshot().steps_per_s == first.steps_per_s > 0, "an empty window keeps the rate"
        assert {"env_step", "push", "other"} <= set(first.time_pct), first.time_pct
        assert abs(sum(first.time_pct.values()) - 100.0) < 1e-6
        stages = {k for snap in snaps for k in snap.timing_ms}
        assert {"drain", "decide", "update", "publish"} <= stages
        shares = snaps[0].host_pct
        assert {"decide", "update", "other"} <= set(shares), shares
        assert all(v >= 0.0 for v in shares.values()) and abs(sum(shares.values()) - 100.0) < 1e-6


def test_the_learner_writes_its_replay_when_due_from_a_thread_and_at_the_end(
    rings: Rings, tmp_path: Path
) -> None:
    """A learner hands its buffer to the replay writer every interval, and writes it whole when it stops."""
    now = [0.0]
    saver = ReplaySaver(tmp_path / "replay_rank0.pt", 5.0, clock=lambda: now[0])
    with _in_process_pair(rings, replay=saver) as (collector, learner, _):
        for _ in range(6):
            collector.step_once()
            learner.run_iteration()
        assert not saver.path.exists()  # type: ignore[union-attr]
        now[0] = 5.0
        collector.step_once()
        learner.run_iteration()
        saver.wait(10.0)
        periodic = peek_replay(tmp_path / "replay_rank0.pt")
        assert 0 < periodic.gstep <= learner.gstep and periodic.transitions > 0
        while learner.run_iteration():
            collector.step_once()
        final = learner.save_replay()
    assert final is not None and final.gstep == learner.gstep == 12
    assert final.transitions == learner.agent.buffer.num_stored == 12 * 4
    restored = _agent(4).buffer
    load_replay(tmp_path / "replay_rank0.pt", restored)
    written = zip(_storage(restored), _storage(learner.agent.buffer), strict=True)
    assert all(torch.equal(a[:12], b[:12]) for a, b in written)


def test_rank_0_votes_done_only_once_every_collector_of_the_run_finished(rings: Rings) -> None:
    """Rank 0 keeps going while another rank's collector may still step, even with its own all done."""
    others_finished = [False]
    with _in_process_pair(rings) as (collector, learner, _):
        learner.hooks = dataclasses.replace(learner.hooks, all_collectors_finished=lambda: others_finished[0])
        for _ in range(200):
            collector.step_once()
            learner.run_iteration()
            if collector.finished and learner.ingestor.unread() == 0 and learner.decider.owed == 0:
                break
        assert collector.finished and learner.updates == 2 * (12 - 2 + 1)
        for _ in range(5):
            assert learner.run_iteration(), "its reading of the steps may not be final yet"
        others_finished[0] = True
        assert not learner.run_iteration() and learner.stopped


def test_a_profiled_learner_loop_logs_its_table_and_trains_the_same(
    rings: Rings, caplog: pytest.LogCaptureFixture
) -> None:
    """FASTSAC_PROFILE_LEARNER's window logs the operator table; the run still ends with the same updates."""
    collector_steps_per_iteration = 2
    with _in_process_pair(rings) as (collector, learner, _), caplog.at_level(logging.INFO):
        original = learner.run_iteration

        def iteration() -> bool:  # the collector runs beside the learner, as in a real run
            for _ in range(collector_steps_per_iteration):
                collector.step_once()
            return original()

        learner.run_iteration = iteration  # type: ignore[method-assign]
        run_learner_loop(learner, profile=3, after_updates=4, name="learner0")
        assert learner.stopped and learner.updates == 2 * (12 - 2 + 1)
    logged = [r.getMessage() for r in caplog.records if "profile of 3 loop iterations" in r.getMessage()]
    assert len(logged) == 1 and "Self CPU time total" in logged[0], logged


def test_a_profile_setting_is_n_iterations_or_n_at_u_updates() -> None:
    """FASTSAC_PROFILE_LEARNER: unset is none, N opens after the default updates, N@U after U."""
    assert profile_iterations({}) == 0 and profile_iterations({PROFILE_ENV: " 50 "}) == 50
    assert profile_window({PROFILE_ENV: "50"}) == ProfileWindow(50, PROFILE_AFTER_UPDATES)
    assert profile_window({PROFILE_ENV: " 40@20000 "}) == ProfileWindow(40, 20000)


@pytest.mark.parametrize("raw", ["abc", "-3", "1.5", "40@", "@200", "40@x", "40@-1"])
def test_an_invalid_profile_setting_names_the_variable_and_the_fix(raw: str) -> None:
    """FASTSAC_PROFILE_LEARNER must be N or N@U (counts): anything else is refused with the fix."""
    with pytest.raises(AsyncConfigError, match=f"{PROFILE_ENV}='{re.escape(raw)}'.*unset it"):
        profile_iterations({PROFILE_ENV: raw})


def test_one_ring_fills_the_replay_exactly_like_the_synchronous_loop(rings: Rings) -> None:
    """1 collector + 1 learner stores byte-for-byte what the synchronous loop's per-step extend stores."""
    steps = 40  # many wraps of the 8-slot ring, so spans end at the wrap and restart at slot 0
    env, ring = FakeBatchedEnv(4, seed=2), rings.make(4, 8)
    ingestor = Ingestor([ring], _buffer(4), max_ingest_per_iter=3)
    pushed = 0
    reference = _buffer(4)
    twin = FakeBatchedEnv(4, seed=2)  # the synchronous loop steps an identical env
    obs, cobs = twin.reset()
    env_obs, env_cobs = env.reset()
    while pushed < steps:
        while pushed < steps and not ring.is_full():
            actions = env.sample_actions()
            res = env.step(actions)
            assert ring.push(
                step_transition(
                    torch.from_numpy(env_obs), torch.from_numpy(env_cobs), torch.from_numpy(actions), res
                )
            )
            env_obs, env_cobs = res.obs.copy(), res.critic_obs.copy()
            twin_actions = twin.sample_actions()
            twin_res = twin.step(twin_actions)
            held = (torch.from_numpy(obs), torch.from_numpy(cobs), torch.from_numpy(twin_actions))
            reference.extend(step_transition(*held, twin_res))
            obs, cobs = twin_res.obs.copy(), twin_res.critic_obs.copy()
            pushed += 1
        ingestor.drain()
    while ingestor.drain():
        pass
    assert ingestor.generations == steps
    for got, want in zip(_storage(ingestor.buffer), _storage(reference), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)  # unwritten rows are NaN


@pytest.mark.parametrize(("max_lead", "stops_at"), [(3, 3), (None, 8)])
def test_a_collector_waits_at_its_lead_though_its_ring_has_room(
    rings: Rings, max_lead: int | None, stops_at: int
) -> None:
    """A collector stops at max_lead unread slots (else a full ring), and steps once one is read."""
    ring = rings.make(4, 8)
    env = FakeBatchedEnv(4, seed=1)
    collector = random_collector(env, ring, CFG, max_lead=max_lead)
    while collector.step_once():
        assert collector.steps <= stops_at
    assert (collector.steps, ring.size()) == (stops_at, stops_at)
    assert not collector.step_once()
    read, _ = ring.read_span(1)
    ring.commit_reads(read)
    assert collector.step_once() and collector.steps == stops_at + 1


class _ScriptedFullness:
    """A real ring whose ``is_full`` answers from a script (then keeps the last answer), counting calls."""

    def __init__(self, ring: HostRing, answers: list[bool]) -> None:
        self._ring = ring
        self._answers = answers
        self.is_full_calls = 0

    def is_full(self) -> bool:
        self.is_full_calls += 1
        return self._answers.pop(0) if len(self._answers) > 1 else self._answers[0]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ring, name)


class _RecordedSleeps:
    """Stands in for the collector module's ``time``: real clock, sleeps recorded instead of slept."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.perf_counter = time.perf_counter

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


def _wait_once(
    rings: Rings, monkeypatch: pytest.MonkeyPatch, answers: list[bool], spin_s: float
) -> tuple[bool, list[float], int]:
    """One ``step_once`` of a collector whose ring answers ``answers``; (stepped, sleeps, is_full calls)."""
    clock = _RecordedSleeps()
    monkeypatch.setattr(collector_module, "time", clock)
    ring = _ScriptedFullness(rings.make(4, 2), answers)
    env = FakeBatchedEnv(4, seed=1)
    collector = random_collector(env, cast(HostRing, ring), CFG, idle_sleep_s=0.25, spin_s=spin_s)
    stepped = collector.step_once()
    return stepped, clock.sleeps, ring.is_full_calls


def test_without_spin_a_collector_facing_a_full_ring_sleeps_at_once(
    rings: Rings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """collector_spin_s=0: one look at the full ring, one idle_sleep_s, no polling loop."""
    assert _wait_once(rings, monkeypatch, [True], spin_s=0.0) == (False, [0.25], 1)


def test_a_spinning_collector_stops_waiting_when_room_appears(
    rings: Rings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spinning collector polls its full ring until a slot frees, and then does not sleep."""
    assert _wait_once(rings, monkeypatch, [True] * 5 + [False], spin_s=60.0) == (False, [], 6)


def test_a_spin_that_finds_no_room_ends_in_one_sleep(rings: Rings, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ring still full after spin_s: polled more than once, then one sleep of idle_sleep_s."""
    stepped, sleeps, calls = _wait_once(rings, monkeypatch, [True], spin_s=0.2)
    assert (stepped, sleeps) == (False, [0.25])
    assert calls > 1


class _NanAt(FakeBatchedEnv):
    """The fake env, paying a NaN reward to env 1 at its third step."""

    def step(self, actions: Any) -> Any:
        result = super().step(actions)
        if self._steps == 3:
            result.rewards[1] = float("nan")
        return result


def test_a_collector_refuses_a_nan_from_its_env_and_pushes_nothing_of_that_step(rings: Rings) -> None:
    """The env's step is checked before its push: a NaN reward raises EnvOutputError naming the env row."""
    from fastsac_core import EnvOutputError

    ring = rings.make(2, 8, shared_obs=True)
    collector = random_collector(_NanAt(2, seed=0, shared_obs=True), ring, CFG)
    assert collector.step_once() and collector.step_once()
    with pytest.raises(EnvOutputError, match=r"_NanAt's step\(\) returned rewards holding nan \(env 1 of"):
        collector.step_once()
    assert ring.size() == 2


def test_a_collector_says_its_envs_own_exception_in_one_line_with_where_it_was_raised(rings: Rings) -> None:
    """An env step that raises leaves as EnvCallError naming the env and its file:line; nothing is pushed."""
    from fastsac_core import EnvCallError

    ring = rings.make(2, 8)
    collector = random_collector(FailingEnvFactory(fail_at_step=3)(2, seed=0), ring, CFG)
    assert collector.step_once() and collector.step_once()
    with pytest.raises(EnvCallError) as caught:
        collector.step_once()
    line = str(caught.value)
    said = (
        r"_FailingEnv's step\(\) raised RuntimeError: env exploded at step 3 "
        r"\(raised at testing\.py:\d+ in step\)"
    )
    assert re.fullmatch(said, line), line
    assert isinstance(caught.value.__cause__, RuntimeError), "the worker's traceback keeps the env's"
    assert ring.size() == 2


class _NoRandomActions(FakeBatchedEnv):
    """The fake env, whose random actions fail (before learning starts a collector draws them)."""

    def sample_actions(self) -> Any:
        raise ValueError("no action space")


def test_a_collector_says_an_exception_of_its_envs_random_actions_in_one_line(rings: Rings) -> None:
    """sample_actions, called while exploring, is the env's own call too: one EnvCallError line."""
    from fastsac_core import EnvCallError

    collector = random_collector(_NoRandomActions(2, seed=0, shared_obs=True), rings.make(2, 8), CFG)
    with pytest.raises(EnvCallError, match=r"^_NoRandomActions's sample_actions\(\) raised ValueError: no "):
        collector.step_once()
