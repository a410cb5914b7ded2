"""A run that stops moving is said once, with every worker's stack written to its log."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from fastsac_async import AsyncOptions, EngineSpec, RunLayout, TrainingRun, run_engine
from fastsac_async.parent import monitor
from fastsac_async.parent.stall import StallWatch
from fastsac_async.testing import FailingEnvFactory, cpu_topology
from fastsac_core import FastSACConfig


def test_a_stall_is_said_once_after_its_time_and_again_only_after_a_move() -> None:
    """No change for after_s: due once (with the seconds); a change resets; a new stall is due again."""
    now = [0.0]
    watch = StallWatch(10.0, clock=lambda: now[0])
    assert watch.check((1, 2)) is None
    now[0] = 9.0
    assert watch.check((1, 2)) is None
    now[0] = 12.0
    assert watch.check((1, 2)) == 12.0
    now[0] = 30.0
    assert watch.check((1, 2)) is None  # said already
    assert watch.check((1, 3)) is None  # moved
    now[0] = 41.0
    assert watch.check((1, 3)) == 11.0


@pytest.mark.slow
def test_an_env_step_that_never_returns_is_said_with_the_stacks_in_the_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A collector stuck in env.step: warned once, its stack in its log; the run stops with a checkpoint.

    The stuck collector is killed at the shutdown (its join times out).
    """
    monkeypatch.setattr(monitor, "STALL_WARN_S", 1.5)
    factory = FailingEnvFactory(fail_at_step=12, hang=True)
    cfg = FastSACConfig(actor_hidden_dim=16, critic_hidden_dim=16, num_atoms=11, batch_size=16,
                        buffer_size=64, num_updates=2, learning_starts=3, compile=False, cudagraphs=False,
                        amp=False)  # fmt: skip
    spec = EngineSpec(
        run=TrainingRun(env_factory=factory, dims=factory(1, 0).dims, seed=3, num_iterations=10**9,
                        logging_interval=5, save_interval=0, run_dir=tmp_path, time_limit_s=6.0),
        topology=cpu_topology(num_envs=8, num_collectors=1, num_learners=1, batch_size=16),
        agent=cfg,
        options=AsyncOptions(num_collectors=1, num_learners=1, ring_capacity=4, boot_timeout_s=120.0),
        rendezvous_timeout_s=60.0,
        shutdown_timeout_s=4.0,  # the stuck collector's join ends there, then it is killed
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="fastsac_async"):
        result = run_engine(dataclasses.replace(spec))
    said = [r.getMessage() for r in caplog.records if "nothing has moved" in r.getMessage()]
    assert len(said) == 1 and "every worker's stack is now in its log" in said[0], said
    assert result.stop_reason == "time_limit" and result.last_checkpoint is not None
    log = RunLayout(tmp_path).log("collector0").read_text(encoding="utf-8")
    assert "most recent call first" in log and "in step" in log, log[-2000:]
