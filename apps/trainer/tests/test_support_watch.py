"""The run's warning when the critics' values sit at the top of their support (Note [support watch])."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fastsac_core import FastSACConfig
from fastsac_trainer import train
from fastsac_trainer.reporting import Snapshot
from fastsac_trainer.support_watch import QF_MAX, SATURATED_REPORTS, SupportWatch
from fastsac_trainer.testing import TINY_RUN

_WATCH_LOG = "fastsac_trainer.support_watch"


def _tick(iteration: int, qf_max: float | None, *, stale: bool = False) -> Snapshot:
    scalars = {} if qf_max is None else {QF_MAX: qf_max}
    return Snapshot(
        iteration=iteration, env_steps=iteration, total_env_steps=100, elapsed_s=1.0, scalars=scalars,
        stale=frozenset({QF_MAX}) if stale else frozenset(),
    )  # fmt: skip


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == _WATCH_LOG and r.levelno == logging.WARNING]


def test_a_support_top_held_for_three_fresh_reports_warns_once_naming_setting_value_and_fix(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Fresh reports within half an atom of v_max, three in a row: one warning, then silence."""
    caplog.set_level(logging.WARNING, logger=_WATCH_LOG)
    watch = SupportWatch(FastSACConfig(v_min=-100.0, v_max=1000.0, num_atoms=101))  # atoms 11 apart
    for i, value in enumerate([994.6, 1000.0, 999.7, 999.0, 1000.0]):
        watch.report(_tick(10 * (i + 1), value))
    (message,) = _warnings(caplog)
    assert "train/qf_max 999.7 with algo.agent.v_max=1000, 3 reports in a row since iteration 10" in message
    assert "algo.agent.v_max=1550, or algo.agent.reward_normalization=true" in message
    assert watch.warned


def test_a_nan_qf_max_breaks_the_count_and_never_warns(caplog: pytest.LogCaptureFixture) -> None:
    """NaN values say nothing of the support: they neither count nor let a count go on."""
    caplog.set_level(logging.WARNING, logger=_WATCH_LOG)
    watch = SupportWatch(FastSACConfig(v_min=-100.0, v_max=1000.0, num_atoms=101))
    nan = float("nan")
    for i, value in enumerate([1000.0, 1000.0, nan, 1000.0, nan, nan, nan]):
        watch.report(_tick(i, value))
    assert _warnings(caplog) == [] and not watch.warned


def test_values_below_the_top_stale_reports_and_missing_metrics_do_not_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A value more than half an atom below the top resets the count; stale or absent values are skipped."""
    caplog.set_level(logging.WARNING, logger=_WATCH_LOG)
    watch = SupportWatch(FastSACConfig(v_min=-100.0, v_max=1000.0, num_atoms=101))
    ticks = [
        _tick(1, 1000.0), _tick(2, 1000.0), _tick(3, 994.4),  # 994.4 < 1000 - 5.5: the count starts over
        _tick(4, 1000.0), _tick(5, 1000.0, stale=True), _tick(6, None), _tick(7, 1000.0),
    ]  # fmt: skip
    for tick in ticks:
        watch.report(tick)
    assert _warnings(caplog) == [] and not watch.warned
    watch.report(_tick(8, 999.0))
    (message,) = _warnings(caplog)
    assert f"{SATURATED_REPORTS} reports in a row since iteration 4" in message


def test_with_reward_normalisation_the_watch_reads_the_normalised_support(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With normalised rewards the top is normalized_v_max (half an atom: 0.1); the fix names that setting."""
    caplog.set_level(logging.WARNING, logger=_WATCH_LOG)
    cfg = FastSACConfig(reward_normalization=True, normalized_v_max=10.0, v_min=-100.0, v_max=1000.0)
    watch = SupportWatch(cfg)
    for i, value in enumerate([9.95, 9.85, 9.95, 9.95]):  # 9.85 is more than 0.1 below 10: it resets
        watch.report(_tick(i, value))
    assert _warnings(caplog) == []
    watch.report(_tick(4, 9.95))  # far below the unused v_max=1000: the normalised top counts
    (message,) = _warnings(caplog)
    assert "with algo.agent.normalized_v_max=10, 3 reports in a row since iteration 2" in message
    assert (
        "widen the support in a new run (a resume keeps the checkpoint's): "
        "algo.agent.normalized_v_max=15 (see" in message
    )


@pytest.mark.slow
def test_a_run_whose_support_is_too_narrow_says_so_in_its_log(tmp_path: Path) -> None:
    """A real (synchronous, in-process) pendulum run on a support of ±1 logs the warning in its run folder."""
    runs = tmp_path / "runs"
    train(
        "pendulum",
        overrides=[
            *TINY_RUN,
            "algo.trainer.asynchronous=false",
            "algo.trainer.num_learning_iterations=12",
            "algo.agent.v_min=-1",
            "algo.agent.v_max=1",  # pendulum pays +1 per upright step: every target is above the top
            f"runs_root={runs}",
            "run_name=narrow",
        ],
    )
    log = (runs / "narrow" / "logs" / "trainer.log").read_text()
    assert log.count("the critics' values sit at the top of their support") == 1, log[-2000:]
    assert "algo.agent.v_max=2, or algo.agent.reward_normalization=true" in log
