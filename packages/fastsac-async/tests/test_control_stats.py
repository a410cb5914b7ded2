import multiprocessing as mp
import queue

from fastsac_async.control import Control
from fastsac_async.stats import CollectorSnapshot, StageTimer, aggregate_collectors, offer


def _child_writes(control: Control, index: int) -> None:
    control.set_collector_steps(index, 41 + index)
    control.set_collector_gauges(index, version=7, lag=2, ring_fill=3)
    control.set_final_checkpoint(0)  # a final checkpoint at step 0 is one too
    control.mark_learner_done(0)


def test_control_is_shared_with_a_spawned_process() -> None:
    """Counters written by a spawned child are read by the parent; the parent's stop reaches readers."""
    control = Control(num_collectors=2, num_learners=1)
    control.resume_collector_steps([10, 20])
    assert control.total_collector_steps() == 30
    assert control.final_checkpoint_step is None and not control.learner_done(0)
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=_child_writes, args=(control, 1))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert control.all_collector_steps() == [10, 42]
    assert control.gauges(1) == (7, 2, 3)
    assert control.final_checkpoint_step == 0 and control.learner_done(0)
    assert not control.stop_requested
    control.request_stop()
    assert control.stop_requested


def test_stage_timer_means() -> None:
    """Running means are total / occurrences per stage, and reset starts a new window."""
    timer = StageTimer(["a", "b"])
    timer.add("a", 0.002)
    timer.add("a", 0.004)
    assert timer.means_ms() == {"a": 3.0}
    timer.reset()
    assert timer.means_ms() == {}


def test_stage_timer_shares_of_the_wall_time() -> None:
    """Shares are each stage's total over the wall time, in percent (0 if unseen), the rest ``other``."""
    timer = StageTimer(["a", "b", "c"])
    timer.add("a", 0.25)
    timer.add("b", 0.5)
    assert timer.shares_pct(2.0) == {"a": 12.5, "b": 25.0, "c": 0.0, "other": 62.5}
    assert timer.shares_pct(0.5)["other"] == 0.0, "overlapping spans never make ``other`` negative"


def _snap(i: int, ret: float | None, episodes: int, lag: int, envs: int = 4) -> CollectorSnapshot:
    return CollectorSnapshot(
        index=i, steps=10, steps_per_s=100.0, num_envs=envs, episodes=episodes, mean_return=ret,
        mean_ep_len=None if ret is None else 50.0, weight_version=3 + i, policy_lag=lag, ring_fill=i,
        timing_ms={"env_step": 2.0 + i}, time_pct={"env_step": 80.0 + i, "other": 20.0 - i},
    )  # fmt: skip


def test_aggregate_collectors() -> None:
    """Mean return over collectors with episodes, summed episodes, max lag, per-collector columns."""
    summary = aggregate_collectors([_snap(0, 10.0, 2, 1), _snap(1, 20.0, 3, 5), _snap(2, None, 0, 0)])
    assert summary.mean_return == 15.0
    assert summary.episodes == 5
    assert summary.max_policy_lag == 5
    assert summary.per_collector["policy_lag_collector1"] == 5.0
    assert summary.steps_per_s == 3 * 400.0
    assert summary.timing_ms["env_step"] == 3.0
    assert summary.time_pct == {"env_step": 81.0, "other": 19.0}
    assert summary.weight_version == 5
    empty = aggregate_collectors([])
    assert empty.mean_return is None and empty.episodes == 0


def test_offer_drops_when_full() -> None:
    """Offer never blocks: a full bounded queue drops the item."""
    q: queue.Queue[int] = queue.Queue(maxsize=1)
    assert offer(q, 1)
    assert not offer(q, 2)
