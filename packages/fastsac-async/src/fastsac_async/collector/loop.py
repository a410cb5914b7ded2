"""One collector's loop, drivable in-process: wait for room, act, step, push, poll weights.

The process entry point (:func:`fastsac_async.collector.process.run_collector`) builds a :class:`Collector`
around attached shared memory; unit tests build one around in-process rings and call
:meth:`Collector.step_once`.

An exception the env's own ``reset`` or ``step`` raises leaves as one line naming the env, the exception
and where it was raised (``fastsac_core.EnvCallError``, the synchronous trainer's wording): the line the
collector's error log starts with and the user reads (Note [error log header] in
:mod:`fastsac_async.worker_process`).

# Note [strict lead]
In strict mode the learner owes ``num_updates`` per collected step, so a learner slower than its
collectors holds them back: they wait for room in their rings. How far ahead they are when they wait
decides how stale the acting policy is: a collector ``k`` unread steps ahead acts with weights that
have not seen its last ``k`` steps, nor the updates those steps owe. With only a full ring as the
bound (64 slots) that lag reached the whole ring and cost pendulum most of its return, and delayed
Walker2d's learning per env step against the synchronous trainer (wiki/benchmarks.md, "The
collectors' lead in strict mode"). So a strict collector also waits while ``max_lead`` of its
steps are unread (``AsyncOptions.max_lead``). The policy then lags its data by at most ``max_lead``
unread steps plus the updates the learner still owes (at most ``max_ingest_per_iter`` steps' worth,
Note [strict back-pressure]); the synchronous trainer's lags by none. The bound also binds while a
learner that keeps up pauses (an update chunk, a snapshot) where the ring used to absorb it, and a
CUDA-IPC ring counts a slot as unread until its learner's next call publishes the read: what that
costs a run's throughput on the GPU host is why the default is 4, not 2 (wiki/decisions.md).
learner_bound mode keeps the ring as its only bound.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from fastsac_async.stats import COLLECTOR_STAGES, CollectorSnapshot, StageTimer
from fastsac_async.transport import PUBLISHED_GSTEP, published_stamp
from fastsac_core import (
    BatchedEnv,
    EnvCall,
    InferencePolicy,
    check_reset,
    check_step,
    learning_started,
    step_transition,
)
from shm_transport import TransitionRing, WeightReader

__all__ = ["Collector", "CollectorSettings"]


@dataclass(frozen=True, kw_only=True)
class CollectorSettings:
    """Knobs of a collector's loop."""

    index: int
    """Collector index (its env block and its column in the stats)."""
    budget: int
    """Steps after which it stops (``num_iterations``: each collector steps every iteration)."""
    learning_starts: int
    """Steps of uniform random actions first, counted from the run's start: a collector resumed at
    ``start_steps`` past them acts with the policy from its first step, one resumed before them acts
    at random until they are reached, as it would have without the stop."""
    weight_poll_interval: int
    """Poll the weight channel every this many steps."""
    idle_sleep_s: float
    """Sleep while there is no room in the ring (back-pressure)."""
    spin_s: float = 0.0
    """Poll the ring without room for up to this long before sleeping (0: sleep at once)."""
    stats_interval: int
    """Steps between stats snapshots (the first goes out after 10 steps)."""
    max_lead: int | None = None
    """Unread steps at which it waits as if its ring were full (Note [strict lead]); None: the ring.
    ``AsyncOptions.collector_lead`` decides it for a run."""


class Collector:
    """A collector: its env shard, its ring (producer end), its weight reader and its policy.

    Args:
        settings: Loop knobs.
        env: Its env shard.
        ring: Producer end of its ring.
        weights: Reader end of its weight channel (None: keep the initial weights).
        policy: Inference policy (CPU or CUDA).
        start_steps: Steps already done (resume).
        on_steps: Publishes its step count (shared counter).
        on_gauges: Publishes ``(weight version, policy lag, ring fill)``.
        on_snapshot: Sends a stats snapshot (never blocks).
    """

    def __init__(
        self,
        *,
        settings: CollectorSettings,
        env: BatchedEnv,
        ring: TransitionRing,
        weights: WeightReader | None,
        policy: InferencePolicy,
        start_steps: int = 0,
        on_steps: Callable[[int], None] = lambda steps: None,
        on_gauges: Callable[[int, int, int], None] = lambda version, lag, fill: None,
        on_snapshot: Callable[[CollectorSnapshot], object] = lambda snapshot: None,
    ) -> None:
        self.settings = settings
        self.env = env
        self.ring = ring
        # Unread steps at which it waits (None: a full ring); a lead of a full ring or more is the ring.
        self._lead = (
            None if settings.max_lead is None or settings.max_lead >= ring.capacity else settings.max_lead
        )
        self.weights = weights
        self.policy = policy
        self.steps = start_steps
        self.timer = StageTimer(COLLECTOR_STAGES)
        self._on_steps = on_steps
        self._on_gauges = on_gauges
        self._on_snapshot = on_snapshot
        self._low = np.asarray(env.dims.action_low, dtype=np.float32)
        self._high = np.asarray(env.dims.action_high, dtype=np.float32)
        self._flat = torch.zeros(policy.numel, device=policy.device)
        # What each poll overwrites: the normalizer's statistics and the publish stamp.
        self._extras = {**policy.policy_extras(), PUBLISHED_GSTEP: published_stamp(0).to(policy.device)}
        self._returns: deque[float] = deque(maxlen=100)
        self._lengths: deque[float] = deque(maxlen=100)
        self._episodes = 0
        self._window_start = time.perf_counter()
        self._last_rate = 0.0
        self._window_steps = 0
        self._last_stats = start_steps
        self._next_stats = start_steps + min(10, settings.stats_interval)
        self.version = 0
        self.lag = 0
        self._shared_obs = env.dims.critic_obs_is_obs  # then the ring has no critic_obs field
        self._stepping = EnvCall(env, "step")  # what the env's code raises leaves as one line
        self._sampling = EnvCall(env, "sample_actions")
        with EnvCall(env, "reset"):
            obs, critic_obs = env.reset()
        check_reset(env, obs, critic_obs)
        self._obs = torch.from_numpy(np.array(obs, dtype=np.float32))
        self._critic_obs = self._own_critic_obs(critic_obs)

    @property
    def finished(self) -> bool:
        """True once the budget is reached."""
        return self.steps >= self.settings.budget

    def poll_weights(self) -> None:
        """Load newer weights if any (never waits for the writer)."""
        if self.weights is None:
            return
        with self.timer.time("weight_sync"):
            version = self.weights.poll(self._flat, self._extras)
            if version is not None:
                self.policy.load_flat(self._flat, self._extras)
                self.version = version
            self.lag = self.weights.lag
        self._on_gauges(self.version, self.lag, self.ring.size())

    def wait_for_weights(self, timeout_s: float, should_stop: Callable[[], bool] = lambda: False) -> bool:
        """Poll until the learner's first weights are loaded; False if ``should_stop()`` came first.

        The learner publishes its initial weights (a resumed run's included) before it ships the
        slots, so the first poll normally finds them; waiting makes the first action come from the
        learner's actor whatever the timing, never from this process's random initialisation.

        Raises:
            TimeoutError: No weights arrived within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        self.poll_weights()
        while self.weights is not None and self.version == 0:
            if should_stop():
                return False
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"collector{self.settings.index} got no weights from its learner within {timeout_s:g} s "
                    "(async_options.boot_timeout_s); read the learner's log"
                )
            time.sleep(0.002)
            self.poll_weights()
        return True

    def _own_critic_obs(self, critic_obs: np.ndarray) -> Tensor | None:
        return None if self._shared_obs else torch.from_numpy(np.array(critic_obs, dtype=np.float32))

    def _actions(self) -> np.ndarray:
        s = self.settings
        with self.timer.time("inference"):
            if not learning_started(self.steps, s.learning_starts):
                with self._sampling:
                    return self.env.sample_actions()
            actions: np.ndarray = np.clip(self.policy(self._obs).cpu().numpy(), self._low, self._high)
            return actions

    def _no_room(self) -> bool:
        """The ring is full, or holds ``max_lead`` unread steps (Note [strict lead])."""
        return self.ring.is_full() if self._lead is None else self.ring.size() >= self._lead  # one read

    def _wait_for_room(self) -> None:
        """Spin while there is no room for up to ``spin_s``, then (still none) sleep ``idle_sleep_s``."""
        deadline = time.perf_counter() + self.settings.spin_s
        while time.perf_counter() < deadline:
            if not self._no_room():
                return
        time.sleep(self.settings.idle_sleep_s)

    def step_once(self) -> bool:
        """One env step and one pushed slot; False (nothing stepped) while there is no room.

        Raises:
            fastsac_core.EnvCallError: The env's own ``step`` raised (one line: the env, the exception
                and where it was raised; the exception is its cause).
            fastsac_core.EnvOutputError: The step's arrays break the env protocol.
        """
        if self._no_room():
            with self.timer.time("wait"):
                self._wait_for_room()
            return False
        actions = self._actions()
        with self.timer.time("env_step"):
            with self._stepping:
                result = self.env.step(actions)
            check_step(self.env, result)
        with self.timer.time("push"):
            pushed = self.ring.push(
                step_transition(self._obs, self._critic_obs, torch.from_numpy(actions), result)
            )
        assert pushed, "the ring had room before the step; a single producer cannot lose it"
        self._obs = torch.from_numpy(np.array(result.obs, dtype=np.float32))
        self._critic_obs = self._own_critic_obs(result.critic_obs)
        self._returns.extend(result.episode_returns.tolist())
        self._lengths.extend(result.episode_lengths.tolist())
        self._episodes += len(result.episode_returns)
        self.steps += 1
        self._window_steps += 1
        if self.finished:
            # The learner may vote done once every collector's count reached the budget and its rings
            # look empty: the last slot must be visible to it by then (a device ring publishes a push
            # only once its copy has landed).
            self.ring.flush()
        self._on_steps(self.steps)
        if self.steps % self.settings.weight_poll_interval == 0:
            self.poll_weights()
        if self.steps >= self._next_stats:
            self._on_snapshot(self.snapshot())
            self._next_stats = self.steps + self.settings.stats_interval
        return True

    def snapshot(self) -> CollectorSnapshot:
        """Stats of the window since the last snapshot (starts a new window)."""
        now = time.perf_counter()
        wall = max(now - self._window_start, 1e-9)
        if self._window_steps:  # an empty window (the final snapshot, say) keeps the last rate
            self._last_rate = self._window_steps / wall
        snap = CollectorSnapshot(
            index=self.settings.index,
            steps=self.steps,
            steps_per_s=self._last_rate,
            num_envs=self.env.num_envs,
            episodes=self._episodes,
            mean_return=float(np.mean(self._returns)) if self._returns else None,
            mean_ep_len=float(np.mean(self._lengths)) if self._lengths else None,
            weight_version=self.version,
            policy_lag=self.lag,
            ring_fill=self.ring.size(),
            timing_ms=self.timer.means_ms(),
            time_pct=self.timer.shares_pct(wall),
        )
        self._episodes = 0
        self._window_steps = 0
        self._window_start = now
        self.timer.reset()
        return snap

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Step until the budget is reached or ``should_stop()``."""
        while not self.finished and not should_stop():
            self.step_once()
        self._on_snapshot(self.snapshot())
