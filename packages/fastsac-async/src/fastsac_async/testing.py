"""Test doubles that ship with the package (importable by spawned children and other packages' tests).

:class:`FakeBatchedEnv` is a tiny deterministic :class:`~fastsac_core.env.BatchedEnv`; the
``*_worker`` functions are worker entry points used to test supervision.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fastsac_async.collector.loop import Collector, CollectorSettings
from fastsac_async.run_layout import RunLayout
from fastsac_async.worker_process import worker_process
from fastsac_core import FastSACConfig, InferencePolicy
from fastsac_core.env import BatchedEnv, EnvDims, StepResult
from fastsac_topology import TrainerTopology, resolve_trainer_topology
from numa_bind import discover_host
from shm_transport import TransitionRing

__all__ = [
    "FailingEnvFactory",
    "FakeBatchedEnv",
    "FakeEnvFactory",
    "FirstActionsEnvFactory",
    "LearnerFaultEnvFactory",
    "UnpickledVariable",
    "cpu_topology",
    "failing_worker",
    "janitor_parent",
    "orphaning_parent",
    "probing_worker",
    "random_collector",
    "sleeping_worker",
]

F32 = npt.NDArray[np.float32]


class FakeBatchedEnv:
    """Deterministic batched env: obs encode (seed, env, step); episodes end every ``episode_len`` steps.

    Args:
        num_envs: Envs in the batch.
        seed: Seed (enters the observations, so shards with different seeds differ).
        obs_dim: Observation length (at least 3).
        act_dim: Action length.
        episode_len: Steps per episode (ends by truncation, or termination on odd envs).
        step_delay_s: Sleep per step (to emulate a slow simulator).
        shared_obs: The critic observes obs (``critic_obs_is_obs``); otherwise its observation is the
            obs with one more column.
    """

    def __init__(
        self,
        num_envs: int,
        seed: int,
        *,
        obs_dim: int = 5,
        act_dim: int = 2,
        episode_len: int = 7,
        step_delay_s: float = 0.0,
        shared_obs: bool = False,
    ) -> None:
        self._n = num_envs
        self._seed = seed
        self._dims = EnvDims(
            obs_dim=obs_dim,
            critic_obs_dim=obs_dim if shared_obs else obs_dim + 1,
            act_dim=act_dim,
            action_low=(-1.0,) * act_dim,
            action_high=(1.0,) * act_dim,
            critic_obs_is_obs=shared_obs,
        )
        self._episode_len = episode_len
        self._delay = step_delay_s
        self._t = np.zeros(num_envs, dtype=np.int64)
        self._ret = np.zeros(num_envs, dtype=np.float32)
        self._rng = np.random.default_rng(seed)
        self._steps = 0

    @property
    def num_envs(self) -> int:
        """Envs in the batch."""
        return self._n

    @property
    def dims(self) -> EnvDims:
        """Dimensions and bounds."""
        return self._dims

    def _obs(self) -> tuple[F32, F32]:
        obs = np.zeros((self._n, self._dims.obs_dim), dtype=np.float32)
        obs[:, 0] = self._seed
        obs[:, 1] = np.arange(self._n)
        obs[:, 2] = self._t
        obs[:, 3:] = self._steps % 97
        if self._dims.critic_obs_is_obs:
            return obs, obs
        critic = np.concatenate([obs, np.full((self._n, 1), 0.5, dtype=np.float32)], axis=1)
        return obs, critic

    def reset(self, seed: int | None = None) -> tuple[F32, F32]:
        """Reset every env."""
        self._t[:] = 0
        self._ret[:] = 0
        return self._obs()

    def step(self, actions: F32) -> StepResult:
        """Step every env; ended envs auto-reset."""
        if self._delay:
            time.sleep(self._delay)
        self._steps += 1
        self._t += 1
        rewards = (1.0 - np.square(actions).mean(axis=1)).astype(np.float32)
        self._ret += rewards
        ended = self._t >= self._episode_len
        odd = (np.arange(self._n) % 2).astype(bool)
        terminated = ended & odd
        truncated = ended & ~odd
        final_obs, _ = self._obs()
        returns = self._ret[ended].copy()
        lengths = self._t[ended].copy()
        self._t[ended] = 0
        self._ret[ended] = 0
        obs, critic = self._obs()
        return StepResult(
            obs=obs,
            critic_obs=critic,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            episode_returns=returns,
            episode_lengths=lengths,
        )

    def sample_actions(self) -> F32:
        """Uniform random actions in [-1, 1]."""
        return self._rng.uniform(-1.0, 1.0, (self._n, self._dims.act_dim)).astype(np.float32)

    def close(self) -> None:
        """Nothing to release."""


@dataclass(frozen=True)
class FakeEnvFactory:
    """Picklable ``(num_envs, seed) -> FakeBatchedEnv``."""

    obs_dim: int = 5
    """Observation length."""
    act_dim: int = 2
    """Action length."""
    episode_len: int = 7
    """Steps per episode."""
    step_delay_s: float = 0.0
    """Sleep per step."""
    shared_obs: bool = False
    """The critic observes obs."""

    def __call__(self, num_envs: int, seed: int) -> BatchedEnv:
        """Build the env."""
        return FakeBatchedEnv(
            num_envs,
            seed,
            obs_dim=self.obs_dim,
            act_dim=self.act_dim,
            episode_len=self.episode_len,
            step_delay_s=self.step_delay_s,
            shared_obs=self.shared_obs,
        )


def random_collector(env: BatchedEnv, ring: TransitionRing, cfg: FastSACConfig, **settings: Any) -> Collector:
    """Collector 0 over ``env`` and ``ring`` that acts randomly and reads no weights.

    Its budget of 100 steps ends before its ``learning_starts``; ``settings`` override its
    ``CollectorSettings`` (``max_lead``, ``idle_sleep_s``, ...).
    """
    knobs: dict[str, Any] = {
        "index": 0, "budget": 100, "learning_starts": 100, "weight_poll_interval": 1, "idle_sleep_s": 0.0,
        "stats_interval": 100, **settings,
    }  # fmt: skip
    return Collector(
        settings=CollectorSettings(**knobs), env=env, ring=ring, weights=None,
        policy=InferencePolicy(env.dims, cfg),
    )  # fmt: skip


class _FailingEnv(FakeBatchedEnv):
    def __init__(self, num_envs: int, seed: int, fail_at_step: int, hang: bool) -> None:
        super().__init__(num_envs, seed, step_delay_s=0.002)
        self._fail_at = fail_at_step
        self._hang = hang

    def step(self, actions: F32) -> StepResult:
        if self._steps + 1 >= self._fail_at:
            if self._hang:
                time.sleep(600.0)  # a simulator that never returns (the test's bound ends it first)
            raise RuntimeError(f"env exploded at step {self._fail_at}")
        return super().step(actions)


@dataclass(frozen=True)
class FailingEnvFactory:
    """Picklable factory of fake envs whose step ``fail_at_step`` fails.

    It raises ``RuntimeError``, or with ``hang`` never returns (it sleeps 600 s).
    """

    fail_at_step: int
    """Step at which ``step`` fails."""
    hang: bool = False
    """Hang at that step instead of raising."""

    def __call__(self, num_envs: int, seed: int) -> BatchedEnv:
        """Build the env."""
        return _FailingEnv(num_envs, seed, self.fail_at_step, self.hang)


@dataclass(frozen=True)
class LearnerFaultEnvFactory(FakeEnvFactory):
    """A :class:`FakeEnvFactory` that also makes learner ``rank`` raise at its ``fail_at_update``-th update.

    Every worker unpickles the engine spec, and with it this factory: unpickled in the process named
    ``learner<rank>``, it makes ``FastSACAgent.update`` raise there (a real failure mid-run of one
    learner, for supervision tests). Nothing changes in any other process.
    """

    rank: int = 0
    """Learner rank that fails."""
    fail_at_update: int = 3
    """Its update call that raises."""
    slow_teardown_s: float = 0.0
    """After the failure, each ring close in that learner first sleeps this long (a teardown that
    waits, as a CUDA-IPC consumer waits for its producer)."""
    mark_file: str = ""
    """If set, the failing learner writes ``time.time()`` of its failure there."""

    def __setstate__(self, state: dict[str, object]) -> None:
        for key, value in state.items():
            object.__setattr__(self, key, value)
        import multiprocessing

        if multiprocessing.current_process().name == f"learner{self.rank}":
            _fail_agent_update_at(self)


def _fail_agent_update_at(fault: LearnerFaultEnvFactory) -> None:
    from fastsac_core import FastSACAgent
    from shm_transport import HostRing

    original = FastSACAgent.update
    close = HostRing.close
    calls = [0]

    def update(agent: FastSACAgent, *args: object, **kwargs: object) -> object:
        calls[0] += 1
        if calls[0] >= fault.fail_at_update:
            if fault.mark_file:
                Path(fault.mark_file).write_text(repr(time.time()))
            HostRing.close = slow_close  # type: ignore[method-assign, assignment]
            raise RuntimeError(f"learner{fault.rank} update {calls[0]} failed (injected)")
        return original(agent, *args, **kwargs)  # type: ignore[arg-type]

    def slow_close(ring: HostRing) -> None:
        time.sleep(fault.slow_teardown_s)
        close(ring)

    FastSACAgent.update = update  # type: ignore[method-assign, assignment]


@dataclass(frozen=True)
class FirstActionsEnvFactory(FakeEnvFactory):
    """A :class:`FakeEnvFactory` whose envs write the actions of their first step to ``folder``.

    The file is ``first_actions_<seed>.npy`` (the collector's seed), written once.
    """

    folder: str = ""
    """Where the files go."""

    def __call__(self, num_envs: int, seed: int) -> BatchedEnv:
        """Build the env."""
        return _FirstActionsEnv(num_envs, seed, Path(self.folder) / f"first_actions_{seed}.npy")


class _FirstActionsEnv(FakeBatchedEnv):
    def __init__(self, num_envs: int, seed: int, path: Path) -> None:
        super().__init__(num_envs, seed, step_delay_s=0.002)
        self._path: Path | None = path

    def step(self, actions: F32) -> StepResult:
        if self._path is not None:
            np.save(self._path, actions)
            self._path = None
        return super().step(actions)


def sleeping_worker(*, name: str, run_dir: Path, parent_pid: int, threads: int, seconds: float) -> None:
    """Worker that prints a line and sleeps (killed by tests)."""
    with worker_process(name=name, run_dir=run_dir, parent_pid=parent_pid, threads=threads):
        print(f"{name} sleeping", flush=True)  # noqa: T201 - checks the stdout redirect
        time.sleep(seconds)


class UnpickledVariable:
    """Keeps ``FASTSAC_TEST_PROBE`` as it was when the object was unpickled (a worker: before its body)."""

    def __init__(self, value: str | None = None) -> None:
        self.value = value

    def __reduce__(self) -> tuple[object, ...]:
        return (_unpickled_variable, ())


def _unpickled_variable() -> UnpickledVariable:
    return UnpickledVariable(os.environ.get("FASTSAC_TEST_PROBE"))


def probing_worker(
    *, name: str, run_dir: Path, parent_pid: int, threads: int, out: Path, unpickled: UnpickledVariable,
    use_cuda: bool = False,
) -> None:  # fmt: skip
    """Worker that writes, as JSON to ``out``, what it started from (Note [fork server]).

    Its parent's pid, whether that process had loaded torch's library before forking it, the run
    parent's pid it was given, its ``OMP_NUM_THREADS``, torch's thread count, the variable
    ``FASTSAC_TEST_PROBE``, whether it started with ``torch._dynamo`` imported, whether torch marks it a
    bad fork (its server had initialised CUDA), and (``use_cuda``) the sum of a tensor it then made on
    the GPU.
    """
    import json

    preloaded_dynamo = "torch._dynamo" in sys.modules  # before this worker imports anything itself
    import torch

    # Set in a child whose parent had initialised CUDA (torch's fork handler): such a child cannot use it.
    cuda_initialized = torch.cuda._is_in_bad_fork()
    with worker_process(name=name, run_dir=run_dir, parent_pid=parent_pid, threads=threads):
        forked_by = os.getppid()
        maps = Path(f"/proc/{forked_by}/maps").read_text()
        facts = {
            "forked_by": forked_by,
            "forker_loaded_torch": "libtorch" in maps,
            "parent_pid": parent_pid,
            "omp_threads": os.environ.get("OMP_NUM_THREADS"),
            "torch_threads": torch.get_num_threads(),
            "probe_variable": os.environ.get("FASTSAC_TEST_PROBE"),
            "probe_variable_at_unpickle": unpickled.value,
            "preloaded_dynamo": preloaded_dynamo,
            "cuda_initialized_at_start": cuda_initialized,
            "cuda_sum": torch.ones(3, device="cuda").sum().item() if use_cuda else None,
        }
        partial = out.with_suffix(".partial")
        partial.write_text(json.dumps(facts))
        partial.replace(out)


def failing_worker(*, name: str, run_dir: Path, parent_pid: int, threads: int, message: str) -> None:
    """Worker that raises ``RuntimeError(message)``."""
    with worker_process(name=name, run_dir=run_dir, parent_pid=parent_pid, threads=threads):
        raise RuntimeError(message)


def orphaning_parent(*, run_dir: Path, pid_file: Path) -> None:
    """A parent that spawns a sleeping worker, records its pid, then waits to be killed."""
    from fastsac_async.parent.supervisor import Supervisor

    sup = Supervisor(run_dir)
    sup.spawn("orphan", sleeping_worker, {"seconds": 60.0}, threads=1)
    while not RunLayout(run_dir).log("orphan").exists():
        time.sleep(0.05)
    partial = pid_file.with_suffix(".partial")
    partial.write_text(str(sup.pid("orphan")))
    partial.replace(pid_file)  # atomic: a reader never sees an empty file
    time.sleep(60.0)
    os.kill(os.getpid(), signal.SIGKILL)


def janitor_parent(*, prefix: str, pid_file: Path) -> None:
    """A run's parent in miniature: a janitor, a named segment, torch files of its own and of a worker.

    It records ``<own pid> <worker pid>`` in ``pid_file`` once all exist, then waits to be killed.
    """
    import subprocess

    from fastsac_async.parent.janitor import Janitor

    janitor = Janitor.start(prefix)
    worker = subprocess.Popen(["sleep", "2"])
    janitor.watch(worker.pid)
    me = os.getpid()
    for name in (f"{prefix}{me}-a1b2c3", f"torch_{me}_11_0", f"torch_{worker.pid}_22_0"):
        (Path("/dev/shm") / name).write_bytes(b"x")
    partial = pid_file.with_suffix(".partial")
    partial.write_text(f"{me} {worker.pid}")
    partial.replace(pid_file)
    time.sleep(60.0)


def cpu_topology(
    *, num_envs: int, num_collectors: int, num_learners: int, batch_size: int
) -> TrainerTopology:
    """A CPU-only, unbound topology on this host (for tests and benchmarks)."""
    return resolve_trainer_topology(
        num_envs=num_envs,
        num_collectors=num_collectors,
        num_learners=num_learners,
        batch_size=batch_size,
        trainer_device="cpu",
        learner_devices=None,
        num_cuda_devices=0,
        collector_inference_device="cpu",
        cpus_per_collector=None,
        transition_ipc="off",
        weight_ipc="off",
        weight_ipc_min_bytes=1 << 24,
        actor_param_bytes=0,
        host=discover_host(with_gpus=False),
    )
