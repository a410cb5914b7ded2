import threading

import pytest

from fastsac_async.exceptions import AsyncConfigError
from fastsac_async.learner.collective import InProcessGroup, SoloCollective
from fastsac_async.learner.decider import Decision, PublishCadence, TrainDecider, split_chunks


def _decider(mode: str = "strict", **kw: int) -> TrainDecider:
    args = {"num_collectors": 2, "num_updates": 4, "learning_starts": 3} | kw
    return TrainDecider(SoloCollective(), utd_mode=mode, **args)  # type: ignore[arg-type]


def test_nothing_is_owed_before_learning_starts() -> None:
    """Before collector_steps reaches learning_starts × num_collectors no update is decided."""
    d = _decider()
    for steps in range(0, 6):
        assert d.step(collector_steps=steps, has_data=True, stop_vote=False).run_updates == 0
    assert d.step(collector_steps=6, has_data=True, stop_vote=False).run_updates == 4


def test_strict_scales_with_the_gstep_delta() -> None:
    """Strict owes num_updates per full batch advanced, counted from the first learning gstep."""
    d = _decider("strict")
    assert d.step(collector_steps=6, has_data=True, stop_vote=False).run_updates == 4
    assert d.step(collector_steps=7, has_data=True, stop_vote=False).run_updates == 0
    assert d.step(collector_steps=12, has_data=True, stop_vote=False).run_updates == 4 * 3
    total = 4 + 12
    assert total == 4 * (12 // 2 - 3 + 1)


def test_learner_bound_runs_num_updates_on_any_progress() -> None:
    """learner_bound owes num_updates whenever gstep advanced, whatever the delta."""
    d = _decider("learner_bound")
    assert d.step(collector_steps=6, has_data=True, stop_vote=False).run_updates == 4
    assert d.step(collector_steps=6, has_data=True, stop_vote=False).run_updates == 0
    assert d.step(collector_steps=20, has_data=True, stop_vote=False).run_updates == 4


def test_empty_buffer_defers_and_keeps_the_owed_count() -> None:
    """Without data the updates are deferred, not dropped, and run once data exists."""
    d = _decider("strict")
    first = d.step(collector_steps=6, has_data=False, stop_vote=False)
    assert first.run_updates == 0 and first.owed == 4
    second = d.step(collector_steps=8, has_data=False, stop_vote=False)
    assert second.run_updates == 0 and second.owed == 8
    third = d.step(collector_steps=8, has_data=True, stop_vote=False)
    assert third.run_updates == 8 and third.owed == 0


def test_resume_owes_nothing_for_batches_before_the_checkpoint() -> None:
    """A resumed decider starts paying at the gstep after its start_gstep."""
    d = _decider("strict", start_gstep=100)
    assert d.step(collector_steps=200, has_data=True, stop_vote=False).run_updates == 0
    assert d.step(collector_steps=204, has_data=True, stop_vote=False).run_updates == 8


def test_a_resumed_decider_owes_its_checkpoints_owed_updates_first() -> None:
    """start_owed (a checkpoint's owed_updates) runs first, capped by max_run, before new gsteps' updates."""
    d = _decider("strict", start_gstep=100, start_owed=14, max_run=10)
    runs = [d.step(collector_steps=200, has_data=True, stop_vote=False).run_updates for _ in range(3)]
    assert runs == [10, 4, 0]
    assert d.step(collector_steps=202, has_data=True, stop_vote=False).run_updates == 4


def test_max_run_caps_a_decision_and_keeps_the_rest_owed() -> None:
    """A decision grants at most max_run updates; the remainder is owed, never dropped."""
    d = _decider("strict", max_run=10)
    first = d.step(collector_steps=20, has_data=True, stop_vote=False)  # gsteps 3..10 -> 32 owed
    assert (first.run_updates, first.owed) == (10, 22)
    runs = [d.step(collector_steps=20, has_data=True, stop_vote=False).run_updates for _ in range(4)]
    assert runs == [10, 10, 2, 0]


def test_strict_stops_ingesting_while_in_debt() -> None:
    """Strict holds the rings (collectors wait) while more than max_run updates are owed."""
    d = _decider("strict", max_run=10)
    d.step(collector_steps=20, has_data=True, stop_vote=False)  # 22 still owed
    assert not d.should_ingest(has_data=True)
    assert d.should_ingest(has_data=False)  # a rank waiting for data always drains
    d.step(collector_steps=20, has_data=True, stop_vote=False)  # 12 owed
    assert not d.should_ingest(has_data=True)
    d.step(collector_steps=20, has_data=True, stop_vote=False)  # 2 owed
    assert d.should_ingest(has_data=True)


def test_done_waits_for_the_updates_still_owed() -> None:
    """Every rank voting done does not stop a run that still owes updates beyond max_run."""
    d = _decider("strict", max_run=10)
    first = d.step(collector_steps=20, has_data=True, stop_vote=False, done_vote=True)
    assert (first.run_updates, first.stop) == (10, False)
    while d.owed:
        decision = d.step(collector_steps=20, has_data=True, stop_vote=False, done_vote=d.owed == 0)
        assert not decision.stop
    final = d.step(collector_steps=20, has_data=True, stop_vote=False, done_vote=True)
    assert final.stop and final.run_updates == 0


def test_learner_bound_never_holds_the_rings() -> None:
    """learner_bound keeps draining whatever is owed: collectors are never throttled."""
    d = _decider("learner_bound", max_run=1)
    d.step(collector_steps=20, has_data=False, stop_vote=False)
    d.step(collector_steps=40, has_data=False, stop_vote=False)
    assert d.owed > 1 and d.should_ingest(has_data=True)


def test_chunks_and_publish_cadence() -> None:
    """Updates run in ≤ num_updates chunks and publish every weight_publish_interval updates."""
    assert split_chunks(10, 4) == [4, 4, 2]
    assert split_chunks(0, 4) == []
    cadence = PublishCadence(3)
    due = [cadence.after(n) for n in [1, 1, 1, 2, 2, 4]]
    assert due == [False, False, True, False, True, True]
    with pytest.raises(AsyncConfigError, match="weight_publish_interval"):
        PublishCadence(0)


def test_bad_mode_names_the_setting() -> None:
    """An unknown utd_mode is rejected with the setting's name."""
    with pytest.raises(AsyncConfigError, match="utd_mode"):
        _decider("fast")


@pytest.mark.parametrize("mode", ["strict", "learner_bound"])
def test_two_ranks_agree_and_defer_together(mode: str) -> None:
    """Rank 0 decides; both ranks get the same counts; one rank without data defers both; stop is shared."""
    group = InProcessGroup(2, timeout_s=5.0)
    # Rank 1 reads different (stale) collector steps and lacks data at loop 1.
    script = [
        # (steps rank0, steps rank1, data rank0, data rank1, stop0, stop1)
        (6, 0, True, True, False, False),
        (10, 6, True, False, False, False),
        (10, 10, True, True, False, False),
        (14, 14, True, True, False, True),
    ]
    results: dict[int, list[Decision]] = {0: [], 1: []}

    def run(rank: int) -> None:
        d = TrainDecider(
            group.member(rank),
            num_collectors=2,
            num_updates=4,
            learning_starts=3,
            utd_mode=mode,  # type: ignore[arg-type]
        )
        for row in script:
            results[rank].append(
                d.step(collector_steps=row[rank], has_data=row[2 + rank], stop_vote=row[4 + rank])
            )

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results[0] == results[1]
    runs = [d.run_updates for d in results[0]]
    expected = [4, 0, 8, 8] if mode == "strict" else [4, 0, 4, 4]
    assert runs == expected
    assert [d.stop for d in results[0]] == [False, False, False, True]
