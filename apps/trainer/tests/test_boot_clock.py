import logging
import pstats
import time
from pathlib import Path

import pytest

from fastsac_async import PROFILE_BOOT_ENV, process_start_time
from fastsac_trainer.boot_clock import BootClock


def test_each_milestone_is_logged_once_with_seconds_since_launch(caplog: pytest.LogCaptureFixture) -> None:
    """A milestone counts from the launch given, is logged once, and a repeat changes nothing."""
    clock = BootClock(launched=time.time() - 5.0)
    with caplog.at_level(logging.INFO, logger="fastsac_trainer.boot_clock"):
        clock.mark("workers running")
        clock.mark("workers running")
        clock.mark("first update")
    assert list(clock.marks) == ["workers running", "first update"]
    assert 5.0 <= clock.marks["workers running"] <= clock.marks["first update"] < 60.0
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and lines[0].startswith("start-up: workers running 5.")
    assert lines[1].endswith("s after launch")


def test_by_default_the_seconds_count_from_this_process_start_or_the_next_launch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a launch time a clock counts from the process's creation; after next_launch(), from then."""
    from fastsac_trainer import boot_clock

    monkeypatch.setattr(boot_clock, "_launched", None)
    assert BootClock().launched == pytest.approx(process_start_time(), abs=0.02)
    before = time.time()
    boot_clock.next_launch()  # a seed list's second run
    assert before <= BootClock().launched <= time.time()


def test_the_milestones_are_summed_up_in_one_line_once(caplog: pytest.LogCaptureFixture) -> None:
    """Once every expected milestone is reached one line sums them up; finish() adds no second one."""
    clock = BootClock(
        launched=time.time() - 5.0, expected=("workers running", "first update", "compiled switch")
    )
    with caplog.at_level(logging.INFO, logger="fastsac_trainer.boot_clock"):
        for milestone in ("workers running", "first update", "compiled switch"):
            clock.mark(milestone)
        clock.finish()
    lines = [r.getMessage() for r in caplog.records if "," in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("start-up: workers running 5.")
    assert ", first update " in lines[0] and lines[0].endswith(" s after launch")
    assert ", compiled switch " in lines[0]


def test_a_single_milestone_is_not_summed_up(caplog: pytest.LogCaptureFixture) -> None:
    """A run that reached one milestone logs its line once: finish() adds no summary repeating it."""
    clock = BootClock(launched=time.time() - 5.0, expected=("first update", "compiled switch"))
    with caplog.at_level(logging.INFO, logger="fastsac_trainer.boot_clock"):
        clock.mark("first update")
        clock.finish()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("start-up: first update 5."), lines


def test_a_start_up_profile_is_written_at_its_milestone_or_marked_incomplete_at_the_end(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> None:
    """FASTSAC_PROFILE_BOOT: the profile is written at the clock's milestone, or incomplete at finish()."""
    from fastsac_trainer import boot_clock

    monkeypatch.setattr(boot_clock, "_profile", None)
    request.addfinalizer(boot_clock.stop_profile)  # never left profiling the session, whatever fails
    reached, ended = tmp_path / "logs" / "reached.prof", tmp_path / "logs" / "ended.prof"
    boot_clock.profile_launch()  # not asked: nothing runs, nothing is written
    BootClock(profile=(reached, "workers running")).mark("workers running")
    assert not reached.exists()

    monkeypatch.setenv(PROFILE_BOOT_ENV, "1")
    with caplog.at_level(logging.INFO, logger="fastsac_trainer.boot_clock"):
        boot_clock.profile_launch()
        clock = BootClock(profile=(reached, "workers running"))
        clock.mark("workers started")
        assert not reached.exists(), "written at its milestone, not before"
        clock.mark("workers running")
        assert {name for _, _, name in pstats.Stats(str(reached)).stats} >= {"mark"}  # type: ignore[attr-defined]
        clock.finish()
        boot_clock.profile_launch()  # a later run of the process that ends before its milestone
        BootClock(profile=(ended, "workers running")).finish()
    assert ended.exists()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("start-up profile")]
    assert lines == [
        f"start-up profile: {reached} (read it with python -m pstats)",
        f"start-up profile: {ended} (incomplete: the run ended before workers running) (read it with python "
        "-m pstats)",
    ]


def test_a_run_refused_before_its_clock_drops_the_profile_and_another_profiler_is_left_alone(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest
) -> None:
    """stop_profile() ends a profile no clock took; under another profiler none is started, in one line."""
    import sys

    from fastsac_trainer import boot_clock

    monkeypatch.setattr(boot_clock, "_profile", None)
    request.addfinalizer(boot_clock.stop_profile)
    monkeypatch.setenv(PROFILE_BOOT_ENV, "1")
    boot_clock.profile_launch()
    assert boot_clock._profile is not None and sys.getprofile() is not None
    boot_clock.stop_profile()  # a refused run: nothing written, nothing left profiling
    assert boot_clock._profile is None and sys.getprofile() is None

    def outer(*args: object) -> None:
        return None

    sys.setprofile(outer)  # a user's own profiler
    try:
        with caplog.at_level(logging.INFO, logger="fastsac_trainer.boot_clock"):
            boot_clock.profile_launch()
        assert boot_clock._profile is None and sys.getprofile() is outer
    finally:
        sys.setprofile(None)
    assert "start-up profile not taken: another profiler runs in this process" in caplog.text
