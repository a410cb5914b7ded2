"""Episode ends, end to end (issue #27): from a collector's env step to the critic loss's n-step batch.

Terminated and time-limited steps go through the collector's ring, ingest (generations or ragged) and
the replay buffer, to the n-step batch and normalised observations the critic loss trains on.

The env's observation encodes ``(collector, env, episode, step in episode, step of the env)``, so every
sampled row is checked exactly against the env's own record of what happened. The pipeline is the real
code in one process: ``Collector.step_once`` over real rings (host shared memory; CUDA IPC and a CUDA
learner in the ``gpu`` variant), ``Learner.run_iteration`` (drain, decide, update), and the agent's own
``update`` (sample, normalise, critic step); only two recorders look on: ``ReplayBuffer.sample`` and
``critic_loss`` are wrapped to keep what they saw.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

from fastsac_async.collector.loop import Collector, CollectorSettings
from fastsac_async.learner.collective import SoloCollective
from fastsac_async.learner.decider import TrainDecider
from fastsac_async.learner.loop import Learner, LearnerHooks, LearnerSettings
from fastsac_core import (
    EnvDims,
    FastSACAgent,
    FastSACConfig,
    InferencePolicy,
    ReplayBuffer,
    StepResult,
    transition_fields,
)
from fastsac_core import _losses as losses
from shm_transport import CudaIpcRing, HostRing, RingCursors, RingLayout, TransitionRing

COLLECTORS, ENVS = 2, 3  # envs per collector
NUM_ENVS = COLLECTORS * ENVS
BUDGET = 30  # steps per collector
GAMMA = 0.9
OBS_DIM, CRITIC_DIM, ACT_DIM = 5, 6, 2
BLOCK, ENV, EPISODE, T, S = range(5)  # the obs columns


def episode_plan(g: int, k: int) -> tuple[int, bool]:
    """``(length, terminated)`` of episode ``k`` of global env ``g`` (else it ends by a time limit).

    Env 1 has a fixed time limit; the others have lengths 1..5, so windows of 3 steps cross episode
    ends often, and episodes of one step end on the very step after a reset.
    """
    if g == 1:
        return 4, False
    return 1 + (g + 2 * k) % 5, g % 3 == 0 or (g % 3 == 2 and k % 2 == 0)


def reward_of(g: int, k: int, t: int) -> float:
    """Each step's reward names its episode: summing in a step of another episode shows."""
    return 10.0 * g + (k % 7) + 0.1 * t


def critic_view(obs: np.ndarray) -> np.ndarray:
    """The critic's observation of actor obs ``(..., OBS_DIM)``: the obs and one column of its own."""
    return np.concatenate([obs, 100.0 - obs[..., T : T + 1]], axis=-1).astype(np.float32)


class EpisodeEnv:
    """A :class:`~fastsac_core.BatchedEnv` whose episodes end as ``episode_plan`` says, recording every step.

    ``log`` keeps, per step of the batch: the obs before it, the action, the reward, both flags, and
    the true obs after it (the final obs where the episode ended, not the reset obs).
    """

    def __init__(self, block: int) -> None:
        self.block = block
        self.g = block * ENVS + np.arange(ENVS)
        self.dims = EnvDims(
            obs_dim=OBS_DIM, critic_obs_dim=CRITIC_DIM, act_dim=ACT_DIM,
            action_low=(-1.0,) * ACT_DIM, action_high=(1.0,) * ACT_DIM,
        )  # fmt: skip
        self.num_envs = ENVS
        self._k = np.zeros(ENVS, np.int64)
        self._t = np.zeros(ENVS, np.int64)
        self._s = 0
        self._ret = np.zeros(ENVS, np.float32)
        self._rng = np.random.default_rng(block)
        self.log: dict[str, list[np.ndarray]] = {
            n: [] for n in ("obs", "actions", "rewards", "term", "trunc", "after")
        }

    def _obs(self) -> np.ndarray:
        obs = np.zeros((ENVS, OBS_DIM), np.float32)
        obs[:, BLOCK], obs[:, ENV], obs[:, EPISODE], obs[:, T], obs[:, S] = (
            self.block, np.arange(ENVS), self._k, self._t, self._s
        )  # fmt: skip
        return obs

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        self._k[:], self._t[:], self._s = 0, 0, 0
        obs = self._obs()
        return obs, critic_view(obs)

    def step(self, actions: np.ndarray) -> StepResult:
        before = self._obs()
        plans = [episode_plan(int(g), int(k)) for g, k in zip(self.g, self._k, strict=True)]
        length = np.array([p[0] for p in plans])
        ends_terminated = np.array([p[1] for p in plans])
        rewards = np.array(
            [reward_of(int(g), int(k), int(t)) for g, k, t in zip(self.g, self._k, self._t, strict=True)],
            np.float32,
        )
        self._ret += rewards
        self._t += 1
        self._s += 1
        ended = self._t >= length
        terminated, truncated = ended & ends_terminated, ended & ~ends_terminated
        final_obs = self._obs()
        returns, lengths = self._ret[ended].copy(), self._t[ended].copy()
        self._k[ended] += 1
        self._t[ended] = 0
        self._ret[ended] = 0.0
        obs = self._obs()
        for name, value in zip(
            ("obs", "actions", "rewards", "term", "trunc", "after"),
            (before, actions, rewards, terminated, truncated, final_obs),
            strict=True,
        ):
            self.log[name].append(np.array(value, copy=True))
        return StepResult(
            obs=obs, critic_obs=critic_view(obs), rewards=rewards, terminated=terminated, truncated=truncated,
            final_obs=final_obs, episode_returns=returns, episode_lengths=lengths,
        )  # fmt: skip

    def sample_actions(self) -> np.ndarray:
        return self._rng.uniform(-1.0, 1.0, (ENVS, ACT_DIM)).astype(np.float32)

    def close(self) -> None:
        pass


@dataclass
class Truth:
    """The envs' records as arrays indexed ``[global env, step of that env]``."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    term: np.ndarray
    trunc: np.ndarray
    after: np.ndarray

    @classmethod
    def of(cls, envs: list[EpisodeEnv]) -> Truth:
        def stacked(name: str) -> np.ndarray:
            # (steps, ENVS, ...) per collector -> (NUM_ENVS, steps, ...)
            return np.concatenate([np.stack(e.log[name]).swapaxes(0, 1) for e in envs])

        return cls(*(stacked(n) for n in ("obs", "actions", "rewards", "term", "trunc", "after")))


@dataclass
class Run:
    """What one pipeline run recorded (all on CPU)."""

    n_steps: int
    truth: Truth
    sampled: list[tuple[dict[str, Tensor], tuple[int, ...]]]
    """Each raw sampled batch, with the steps each env block held when it was drawn."""
    trained: list[dict[str, Tensor]]
    """Per sampled batch: its rows as the critic loss got them (minibatches in order), and the
    normalisers' ``mean``, ``std`` and ``eps`` of the moment (``obs_*``, ``critic_*``)."""
    storage: dict[str, Tensor]
    block_written: tuple[int, ...]
    capacity: int


CFG: dict[str, Any] = dict(
    actor_hidden_dim=16, critic_hidden_dim=16, num_atoms=11, batch_size=4 * NUM_ENVS, buffer_size=16,
    num_updates=2, learning_starts=4, gamma=GAMMA, obs_normalization=True, compile=False, cudagraphs=False,
    amp=False,
)  # fmt: skip
NORMALISER_STATS = ("obs_mean", "obs_std", "obs_eps", "critic_mean", "critic_std", "critic_eps")


def _rows(batch: Any) -> dict[str, Tensor]:
    return {name: value.detach().to("cpu", copy=True) for name, value in batch._asdict().items()}


@contextlib.contextmanager
def _recording(
    agent: FastSACAgent,
    sampled: list[tuple[dict[str, Tensor], tuple[int, ...]]],
    trained: list[dict[str, Tensor]],
) -> Iterator[None]:
    """Keep every batch the agent samples and every minibatch its critic loss gets (the real calls run)."""
    buffer, sample, critic_loss = agent.buffer, agent.buffer.sample, losses.critic_loss
    pending: list[dict[str, Tensor]] = []

    def recorded_sample(batch_per_env: int) -> Any:
        batch = sample(batch_per_env)
        sampled.append((_rows(batch), buffer.block_written))
        pending.clear()
        return batch

    def recorded_critic_loss(batch: Any, *args: Any, **kwargs: Any) -> Any:
        pending.append(_rows(batch))
        if sum(p["obs"].shape[0] for p in pending) == sampled[-1][0]["obs"].shape[0]:  # its last minibatch
            seen = {name: torch.cat([p[name] for p in pending]) for name in pending[0]}
            for key, norm in (("obs", agent.obs_normalizer), ("critic", agent.critic_obs_normalizer)):
                seen |= {f"{key}_mean": norm.mean.cpu().clone(), f"{key}_std": norm.std.cpu().clone(),
                         f"{key}_eps": torch.tensor(norm.eps)}  # fmt: skip
            trained.append(seen)
        return critic_loss(batch, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(buffer, "sample", recorded_sample)
        patch.setattr(losses, "critic_loss", recorded_critic_loss)
        yield


RingPair = tuple[TransitionRing, TransitionRing]
"""(producer end, consumer end) of one collector's ring."""


@contextlib.contextmanager
def host_rings(layout: RingLayout) -> Iterator[RingPair]:
    """A host shared-memory ring (both ends are the one in-process object)."""
    ring = HostRing.create(layout, 4)
    try:
        yield ring, ring
    finally:
        ring.close()
        ring.unlink()


@contextlib.contextmanager
def ipc_rings(layout: RingLayout) -> Iterator[RingPair]:
    """A CUDA-IPC ring on cuda:0: the learner's consumer allocates, the collector's producer attaches."""
    cursors = RingCursors.create(4)
    try:
        consumer = CudaIpcRing.create_consumer(layout, 4, "cuda:0", cursors.handle)
        producer = CudaIpcRing.attach_producer(consumer.producer_handle())
        try:
            yield producer, consumer
        finally:
            producer.close()  # the producer detaches first (Note [CUDA-IPC teardown order])
            consumer.close()
    finally:
        cursors.close()
        cursors.unlink()


def _collector(index: int, env: EpisodeEnv, ring: TransitionRing, cfg: FastSACConfig) -> Collector:
    """The real collector loop over ``env`` and the producer end ``ring``: random actions, then its policy."""
    settings = CollectorSettings(
        index=index, budget=BUDGET, learning_starts=6, weight_poll_interval=1,
        idle_sleep_s=0.0, stats_interval=100,
    )  # fmt: skip
    return Collector(
        settings=settings, env=env, ring=ring, weights=None, policy=InferencePolicy(env.dims, cfg)
    )


def run_pipeline(
    *, ragged: bool, n_steps: int, device: str = "cpu", rings: Callable[[RingLayout], Any] = host_rings
) -> Run:
    """Two collectors (the first stepping twice as often) and one learner, to the end of their budget."""
    cfg = FastSACConfig(**CFG, num_steps=n_steps)
    envs = [EpisodeEnv(block) for block in range(COLLECTORS)]
    dims = envs[0].dims
    layout = RingLayout.of(ENVS, transition_fields(OBS_DIM, CRITIC_DIM, ACT_DIM))
    blocks = [ENVS] * COLLECTORS if ragged else None
    buffer = ReplayBuffer.of(dims, cfg, NUM_ENVS, device=device, blocks=blocks)
    agent = FastSACAgent(dims, cfg, device, buffer=buffer)
    sampled: list[tuple[dict[str, Tensor], tuple[int, ...]]] = []
    trained: list[dict[str, Tensor]] = []
    with contextlib.ExitStack() as stack:
        # One intra-op thread, as a worker sets its own: on tiny tensors more threads only spin, and on a
        # busy 2-core CI machine that made the file several times slower.
        stack.callback(torch.set_num_threads, torch.get_num_threads())
        torch.set_num_threads(1)
        pairs = [stack.enter_context(rings(layout)) for _ in range(COLLECTORS)]
        collectors = [
            _collector(i, env, producer, cfg)
            for i, (env, (producer, _)) in enumerate(zip(envs, pairs, strict=True))
        ]
        learner = Learner(
            rank=0, agent=agent, rings=[consumer for _, consumer in pairs], writers=[],
            decider=TrainDecider(SoloCollective(), num_collectors=COLLECTORS, num_updates=cfg.num_updates,
                                 learning_starts=cfg.learning_starts, utd_mode="strict"),
            settings=LearnerSettings(num_updates=cfg.num_updates, weight_publish_interval=1000,
                                     max_ingest_per_iter=3, idle_sleep_s=0.0, logging_interval=1000,
                                     save_interval=0, ragged_ingest=ragged),
            hooks=LearnerHooks(collector_steps=lambda: sum(c.steps for c in collectors),
                               collectors_finished=lambda: all(c.finished for c in collectors),
                               stop_requested=lambda: False),
        )  # fmt: skip
        with _recording(agent, sampled, trained):
            for _ in range(40 * BUDGET):  # bounded: about 2 * BUDGET rounds are needed
                for collector, steps in zip(collectors, (2, 1), strict=True):
                    for _ in range(steps):
                        if not collector.finished:
                            collector.step_once()
                if not learner.run_iteration():
                    break
            else:
                pytest.fail(f"the learner did not stop; collectors at {[c.steps for c in collectors]}")
        learner.ingestor.wait_ingest()
        storage = {name: t.cpu().clone() for name, t in buffer.storage.items()}
    assert [len(e.log["obs"]) for e in envs] == [BUDGET] * COLLECTORS
    assert buffer.block_written == (BUDGET,) * len(buffer.blocks), "every step reached the replay"
    assert sampled and len(trained) == len(sampled), "every sampled batch reached the critic loss"
    return Run(n_steps, Truth.of(envs), sampled, trained, storage, buffer.block_written, buffer.capacity)


# ------------------------------------------------------------------------------------- ground truth


@dataclass(frozen=True)
class Expected:
    """What one sampled row must be, from the env's record (Note [replay layout] in fastsac_core._replay)."""

    g: int
    s: int
    obs: np.ndarray
    valid: bool
    """False only for a transition whose first step hit a time limit (its true next obs is not stored)."""
    length: int
    """Steps in the n-step window: up to n, through a terminated step, stopping before a time-limited
    step, and never past the newest step whose next obs is stored."""
    terminal: bool
    reward: float
    next_obs: np.ndarray | None
    """The obs that followed the window's last step in the same episode (None: no bootstrap)."""
    why: str
    """Which rule ended the window."""


def expected(run: Run, g: int, s: int, written: int) -> Expected:
    """Ground truth of the transition starting at step ``s`` of env ``g`` when its block held ``written``."""
    tr = run.truth
    k, t = int(tr.obs[g, s, EPISODE]), int(tr.obs[g, s, T])
    length, ends_terminated = episode_plan(g, k)
    if not ends_terminated and t == length - 1:
        return Expected(g, s, tr.obs[g, s], False, 1, False, float(tr.rewards[g, s]), None, "time limit")
    left = length - t if ends_terminated else length - 1 - t  # steps through the terminal / before the cut
    newest = written - 1 - s  # step s+m-1 needs the obs of step s+m stored
    m = min(run.n_steps, left, newest)
    ended_by = "terminated" if ends_terminated else "time limit"
    why = "n" if m == run.n_steps else "newest stored step" if m == newest else ended_by
    terminal = ends_terminated and m == length - t
    reward = sum(GAMMA**i * float(tr.rewards[g, s + i]) for i in range(m))
    next_obs = None if terminal else tr.after[g, s + m - 1]
    return Expected(g, s, tr.obs[g, s], True, m, terminal, reward, next_obs, why)


Row = tuple[dict[str, Tensor], Expected, dict[str, Tensor]]
"""A sampled row, its ground truth, and the row as the critic loss got it (with the normalisers)."""


def identify(run: Run) -> tuple[list[Row], list[str]]:
    """Identify every sampled row by its obs, check it is a stored complete step, pair it with its truth."""
    rows: list[Row] = []
    problems: list[str] = []
    for (raw, written), seen in zip(run.sampled, run.trained, strict=True):
        stats = {name: seen[name] for name in NORMALISER_STATS}
        for r in range(raw["obs"].shape[0]):
            obs = raw["obs"][r].numpy()
            g, s = int(obs[BLOCK]) * ENVS + int(obs[ENV]), int(obs[S])
            where = f"row {r} (env {g}, step {s}, episode {int(obs[EPISODE])}, t {int(obs[T])})"
            block_written = written[0] if len(written) == 1 else written[g // ENVS]
            if g != r % NUM_ENVS:
                problems.append(f"{where}: sampled in env column {r % NUM_ENVS}")
            elif not max(0, block_written - run.capacity) <= s <= block_written - 2:
                problems.append(f"{where}: not a stored complete step (its block held {block_written})")
            elif not np.array_equal(obs, run.truth.obs[g, s]):
                problems.append(f"{where}: obs {obs} is not the env's obs of that step")
            else:
                row = {name: value[r] for name, value in raw.items()}
                trained = {name: seen[name][r] for name in raw} | stats
                rows.append((row, expected(run, g, s, block_written), trained))
    return rows, problems


PARAMS = [(ragged, n) for ragged in (False, True) for n in (1, 3)]


@pytest.fixture(
    scope="module", params=PARAMS, ids=[f"{'ragged' if r else 'generations'}-n{n}" for r, n in PARAMS]
)
def run(request: pytest.FixtureRequest) -> Run:
    """One pipeline run per (ingest mode, n); its rings are closed and unlinked before any test looks."""
    ragged, n_steps = request.param
    return run_pipeline(ragged=ragged, n_steps=n_steps)


@pytest.fixture(scope="module")
def rows(run: Run) -> list[Row]:
    found, problems = identify(run)
    _fail(problems)
    return found


def _fail(problems: list[str]) -> None:
    assert not problems, f"{len(problems)} wrong, the first ones:\n" + "\n".join(problems[:8])


def window_length(row: dict[str, Tensor]) -> int:
    """The window length m of a sampled row, read back from its discount ``gamma ** m``."""
    return round(math.log(float(row["discount"])) / math.log(GAMMA))


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-4)


# ------------------------------------------------------------------------------------- the properties


def storage_problems(run: Run) -> list[str]:
    """Each env's stored steps, slot by slot, against what its env did at that step."""
    problems = []
    tr = run.truth
    for g in range(NUM_ENVS):
        written = run.block_written[0 if len(run.block_written) == 1 else g // ENVS]
        for s in range(max(0, written - run.capacity), written):
            stored = {name: value[s % run.capacity, g].numpy() for name, value in run.storage.items()}
            want = {
                "obs": tr.obs[g, s], "critic_obs": critic_view(tr.obs[g, s]), "actions": tr.actions[g, s],
                "rewards": tr.rewards[g, s], "terminated": tr.term[g, s], "truncated": tr.trunc[g, s],
            }  # fmt: skip
            wrong = [name for name in want if not np.array_equal(stored[name], want[name])]
            if wrong:
                problems.append(f"env {g} step {s}: stored {wrong} differ: {stored} != {want}")
    return problems


def terminal_problems(rows: list[Row]) -> list[str]:
    """Windows through a terminated step: bootstrap 0 and the terminal step's reward summed in."""
    problems = []
    for row, want, _ in rows:
        where = f"env {want.g} step {want.s} ({want.why})"
        if want.valid and float(row["bootstrap"]) != (0.0 if want.terminal else 1.0):
            problems.append(f"{where}: bootstrap {float(row['bootstrap'])}, terminal {want.terminal}")
        elif want.terminal and not _close(float(row["rewards"]), want.reward):
            problems.append(f"{where}: terminal return {float(row['rewards'])} != {want.reward}")
    return problems


def truncation_problems(rows: list[Row]) -> list[str]:
    """Weight 0 exactly for a time-limited first step; no weighted row bootstraps from another episode."""
    problems = []
    for row, want, _ in rows:
        where = f"env {want.g} step {want.s} ({want.why})"
        if float(row["valid"]) != float(want.valid):
            problems.append(f"{where}: valid {float(row['valid'])}, expected {float(want.valid)}")
        elif want.valid and float(row["bootstrap"]) == 1.0:
            start, nxt = row["obs"].numpy(), row["next_obs"].numpy()
            if (nxt[BLOCK], nxt[ENV], nxt[EPISODE]) != (start[BLOCK], start[ENV], start[EPISODE]):
                problems.append(f"{where}: bootstraps from {nxt}, an obs of another episode (a reset obs)")
    return problems


def next_obs_problems(rows: list[Row]) -> list[str]:
    """A bootstrapped next obs (and critic obs) is what followed the window's last action in its episode."""
    problems = []
    for row, want, _ in rows:
        if not want.valid or float(row["bootstrap"]) != 1.0:
            continue
        where = f"env {want.g} step {want.s} ({want.why})"
        if want.next_obs is None or not np.array_equal(row["next_obs"].numpy(), want.next_obs):
            problems.append(f"{where}: next obs {row['next_obs'].tolist()}, expected {want.next_obs}")
        elif not np.array_equal(row["next_critic_obs"].numpy(), critic_view(want.next_obs)):
            problems.append(f"{where}: next critic obs {row['next_critic_obs'].tolist()} is not that step's")
    return problems


def window_problems(rows: list[Row]) -> list[str]:
    """n-step windows stop after a terminated step, before a time-limited one, at the newest; sums match."""
    problems = []
    for row, want, _ in rows:
        if not want.valid:
            continue
        where = f"env {want.g} step {want.s} ({want.why})"
        m = window_length(row)
        if m != want.length:
            problems.append(f"{where}: a window of {m} steps, expected {want.length}")
        elif not _close(float(row["rewards"]), want.reward):
            problems.append(f"{where}: n-step reward {float(row['rewards'])} != {want.reward} (m={m})")
    return problems


def normalisation_problems(rows: list[Row]) -> list[str]:
    """The critic loss got the normalisers of the moment applied to the true obs and next obs."""
    problems = []
    for row, want, seen in rows:
        where = f"env {want.g} step {want.s} ({want.why})"

        def normalised(x: np.ndarray, key: str, seen: dict[str, Tensor] = seen) -> Tensor:
            return (torch.from_numpy(x) - seen[f"{key}_mean"]) / (seen[f"{key}_std"] + seen[f"{key}_eps"])

        truths = [("obs", want.obs, "obs"), ("critic_obs", critic_view(want.obs), "critic")]
        if want.next_obs is not None:
            truths += [
                ("next_obs", want.next_obs, "obs"),
                ("next_critic_obs", critic_view(want.next_obs), "critic"),
            ]
        for name, truth, key in truths:
            if not torch.allclose(seen[name], normalised(truth, key), rtol=1e-5, atol=1e-5):
                problems.append(
                    f"{where}: {name} trained on {seen[name].tolist()}, not the normalised true one"
                )
        for name in ("rewards", "bootstrap", "discount", "valid", "actions"):
            if not torch.equal(seen[name], row[name]):
                problems.append(
                    f"{where}: {name} {seen[name].tolist()} in the loss, {row[name].tolist()} sampled"
                )
    return problems


def coverage(rows: list[Row]) -> set[str]:
    """Which episode-end cases the sampled rows hit."""
    return {want.why for _, want, _ in rows} | {"terminal" for _, want, _ in rows if want.terminal}


def test_the_replay_holds_each_collector_step_with_its_own_flags_reward_and_action(run: Run) -> None:
    """Every stored slot is the env's step: obs before it, its action, reward and end flags, aligned."""
    _fail(storage_problems(run))


def test_a_terminated_step_never_bootstraps_and_its_reward_is_summed_in(rows: list[Row]) -> None:
    """A window through a terminated step has bootstrap 0 and a return that includes the terminal reward."""
    assert "terminal" in coverage(rows)
    _fail(terminal_problems(rows))


def test_a_time_limited_step_is_excluded_and_nothing_bootstraps_from_a_reset_obs(rows: list[Row]) -> None:
    """valid=0 exactly where a time limit cut the first step; no weighted row bootstraps across episodes."""
    assert "time limit" in coverage(rows)
    _fail(truncation_problems(rows))


def test_every_bootstrapped_next_obs_followed_the_last_action_in_the_same_episode(rows: list[Row]) -> None:
    """next_obs (and next_critic_obs) of a bootstrapped row is the env's true obs after the window."""
    _fail(next_obs_problems(rows))


def test_nstep_windows_stop_at_episode_ends_and_sum_only_their_own_episode(run: Run, rows: list[Row]) -> None:
    """A window ends after a terminated step, before a time-limited one, or at the newest stored step."""
    if run.n_steps > 1:
        assert {"terminated", "time limit", "n"} <= coverage(rows), coverage(rows)
    _fail(window_problems(rows))


def test_the_critic_trains_on_the_normalised_true_obs_and_next_obs(rows: list[Row]) -> None:
    """The normalised obs and next obs in the critic loss are the normaliser of the true raw ones."""
    _fail(normalisation_problems(rows))


@pytest.mark.gpu
@pytest.mark.parametrize("ragged", [False, True], ids=["generations", "ragged"])
@pytest.mark.parametrize("transport", ["cuda_ipc", "host_to_cuda"])
def test_episode_ends_reach_a_cuda_learner_intact(transport: str, ragged: bool) -> None:
    """Through CUDA-IPC rings, or host rings staged to a CUDA replay, every property above holds (n=3)."""
    run = run_pipeline(
        ragged=ragged, n_steps=3, device="cuda:0", rings=ipc_rings if transport == "cuda_ipc" else host_rings
    )
    found, problems = identify(run)
    problems += storage_problems(run)
    for check in (terminal_problems, truncation_problems, next_obs_problems, window_problems):
        problems += check(found)
    problems += normalisation_problems(found)
    assert {"terminal", "terminated", "time limit", "n"} <= coverage(found)
    _fail(problems)
