"""The hosts of one run: torchrun's context, the agreement before start, the heartbeat watch."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta

import pytest
import torch.distributed as dist

from fastsac_async.hosts import HostGroup, open_store
from fastsac_trainer.arguments import composed
from fastsac_trainer.cluster.agree import HostRecord, check_agreement, host_record, render_hosts
from fastsac_trainer.cluster.context import launch_context
from fastsac_trainer.cluster.watch import HostWatch
from fastsac_trainer.config.exceptions import TrainerAppError

TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "job7",
    "GROUP_RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_WORLD_SIZE": "1",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29400",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
    "TORCHELASTIC_RESTART_COUNT": "0",
}


def test_no_torchrun_means_no_launch_context() -> None:
    """Without torchrun's variables there is no context (nothing changes)."""
    assert launch_context({"WORLD_SIZE": "2", "RANK": "1"}) is None


def test_the_launch_context_reads_torchruns_environment() -> None:
    """Host rank, host count and the agent's store come from torchrun's variables."""
    launch = launch_context(TORCHRUN)
    assert launch is not None and (launch.host_rank, launch.num_hosts) == (1, 2)
    group = launch.host_group()
    assert (group.store_host, group.store_port, group.serve_store, group.primary) == (
        "10.0.0.1",
        29400,
        False,
        False,
    )
    assert group.store_prefix == "fastsac/job7/0/"
    own = launch_context({**TORCHRUN, "GROUP_RANK": "0", "TORCHELASTIC_USE_AGENT_STORE": "False"})
    assert own is not None and own.host_group().serve_store  # host 0 serves the store itself


def test_more_than_one_trainer_per_host_is_one_line() -> None:
    """Torchrun --nproc-per-node 2 is refused: the trainer starts its own learners."""
    with pytest.raises(TrainerAppError, match=r"--nproc-per-node=2 is invalid.*--nproc-per-node 1"):
        launch_context({**TORCHRUN, "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"})


def _record(host: int, **settings: object) -> HostRecord:
    base: dict[str, object] = {
        "task": "humanoid",
        "task.num_envs": 1024,
        "algo.trainer.asynchronous": True,
        "learners per host": 2,
        "algo.agent.actor_hidden_dim": 512,
        "algo.agent.batch_size": 8192,
    }
    return HostRecord(host=host, hostname=f"node{host}", settings={**base, **settings},
                      learner_devices=["cuda:0", "cuda:1"], collectors=8)  # fmt: skip


def test_agreeing_hosts_pass_and_render_the_whole_run() -> None:
    """Hosts with one run's settings agree; the plan shows every host's global learner ranks."""
    records = [_record(0), _record(1)]
    check_agreement(records)
    text = render_hosts(records, 1, "node0:29400")
    assert "run across 2 hosts" in text and "this is host 1" in text
    assert "host 1 (node1): learner rank 2 on cuda:0, 3 on cuda:1; 8 collectors, 1024 envs" in text
    assert "4 learners, 2048 envs, batch 8192 (2048 per learner)" in text


@pytest.mark.parametrize(
    ("other", "message"),
    [
        ({"task": "ant"}, "hosts disagree on task: host 0 (node0) has 'humanoid', host 1 (node1) has 'ant'"),
        (
            {"task.num_envs": 512},
            "hosts disagree on task.num_envs: host 0 (node0) has 1024, host 1 (node1) has 512",
        ),
        ({"algo.agent.actor_hidden_dim": 256}, "hosts disagree on algo.agent.actor_hidden_dim"),
    ],
)
def test_hosts_that_disagree_get_one_line_naming_the_host_and_values(
    other: dict[str, object], message: str
) -> None:
    """A setting that differs between hosts is one line with the setting, both hosts and both values."""
    with pytest.raises(TrainerAppError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        check_agreement([_record(0), _record(1, **other)])


def test_hosts_that_differ_in_any_hyper_parameter_disagree() -> None:
    """Records built from real resolved runs: a gamma that differs between hosts is named, not all-reduced."""
    base = ["task=pendulum", "algo.trainer.device=cpu"]
    runs = [composed([*base, f"algo.agent.gamma={gamma}"])[0] for gamma in (0.99, 0.9)]
    records = [HostRecord.from_json(host_record(h, run, None, None).to_json()) for h, run in enumerate(runs)]
    same = HostRecord.from_json(host_record(1, runs[0], None, None).to_json())
    assert same.settings == records[0].settings  # the JSON round trip keeps equal settings equal
    with pytest.raises(TrainerAppError, match=r"^hosts disagree on algo.agent.gamma: host 0 .* 0.99, host 1"):
        check_agreement(records)


def test_a_batch_that_does_not_divide_across_all_envs_is_one_line() -> None:
    """The batch must divide across every env of every host, not only one host's."""
    records = [_record(h, **{"algo.agent.batch_size": 8192}) for h in range(3)]
    with pytest.raises(TrainerAppError) as info:
        check_agreement(records)
    assert str(info.value) == (
        "algo.agent.batch_size=8192 is invalid: it is not divisible by the run's 3072 envs "
        "(each env gives every update batch_size / 3072 samples); use 6144 or 9216"
    )


def test_a_host_that_failed_to_start_stops_every_host() -> None:
    """A host that failed before it could agree is named with its own line."""
    failed = dataclasses.replace(HostRecord.failed(1, "task=nope is invalid"), hostname="node1")
    with pytest.raises(TrainerAppError, match=r"^host 1 \(node1\) could not start: task=nope is invalid"):
        check_agreement([_record(0), failed])


def _serve() -> tuple[dist.TCPStore, HostGroup]:
    server = dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=5)
    )
    group = HostGroup(host_rank=0, num_hosts=2, store_host="127.0.0.1", store_port=server.port,
                      store_prefix="test/")  # fmt: skip
    return server, group


@pytest.fixture
def store_group() -> HostGroup:
    server, group = _serve()
    yield group  # type: ignore[misc]
    del server


def _watch(group: HostGroup, host: int, lost_after_s: float = 1.0) -> HostWatch:
    return HostWatch(lambda: open_store(group, 5.0), host=host, num_hosts=2,
                     store=(group.store_host, group.store_port), interval_s=0.1,
                     lost_after_s=lost_after_s)  # fmt: skip


def test_a_host_whose_heartbeat_stops_is_named_within_the_bound(store_group: HostGroup) -> None:
    """Host 1 beats once, then never again: host 0's watch names it as lost after lost_after_s."""
    open_store(store_group, 5.0).set("beat/1", "0")
    watch = _watch(store_group, 0)
    watch.start()
    started = time.monotonic()
    try:
        lost = watch.verdict(10.0)
    finally:
        watch.close()
    assert lost is not None and lost.startswith("host 1 lost: no heartbeat for"), lost
    assert 1.0 <= time.monotonic() - started < 5.0


def test_a_host_that_ends_is_never_lost(store_group: HostGroup) -> None:
    """A host that left done (its heartbeat stopped with it) is not named as lost."""
    host0, host1 = _watch(store_group, 0), _watch(store_group, 1)
    host0.start()
    host1.start()
    host1.close()
    try:
        assert host0.verdict(2.5) is None
    finally:
        host0.close()


def test_the_host_that_failed_first_is_named_with_its_line(store_group: HostGroup) -> None:
    """Host 1 fails first, host 0 after it (its collective broke): host 0 names host 1's failure."""
    host0, host1 = _watch(store_group, 0), _watch(store_group, 1)
    host0.start()
    host1.start()
    host1.failed("learner0 raised")
    host0.failed("learner0: connection closed by peer")
    try:
        lost = host0.verdict(5.0)
    finally:
        host0.close()
        host1.close()
    assert lost == "host 1 failed: learner0 raised"


def test_a_host_whose_knock_gets_no_answer_still_says_it_failed_and_never_done(
    store_group: HostGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A knock with no answer in time (a lost SYN) is no verdict: left/<host> holds the failure, not done."""
    watch = _watch(store_group, 1)
    monkeypatch.setattr(watch, "_knock", lambda: None)
    watch.start()
    watch.failed("learner0 raised")
    watch.close()
    assert open_store(store_group, 5.0).get("left/1") == b"1 learner0 raised"


def test_a_host_that_failed_never_says_done_even_where_its_line_could_not_be_said(
    store_group: HostGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store call of failed() raising (no answer in time, then a broken client): close() says nothing."""

    class Broken:  # a client whose calls fail, as one whose connection broke
        def __init__(self) -> None:
            self._store = open_store(store_group, 5.0)

        def set(self, key: str, value: str) -> None:
            self._store.set(key, value)

        def add(self, key: str, amount: int) -> int:
            raise RuntimeError("connection reset by peer")

    watch = HostWatch(Broken, host=1, num_hosts=2, store=(store_group.store_host, store_group.store_port),
                      interval_s=0.1)  # fmt: skip
    monkeypatch.setattr(watch, "_knock", lambda: None)
    watch.failed("learner0 raised")
    watch.close()
    assert not open_store(store_group, 5.0).check(["left/1"])


@pytest.mark.parametrize("learners_first", [True, False], ids=["learners-saw-it-first", "watch-alone"])
def test_a_store_that_refuses_connections_is_host_0_lost_at_once_and_quietly(
    capfd: pytest.CaptureFixture[str], learners_first: bool
) -> None:
    """Host 0's store gone: host 1 names host 0 within a beat or two, not lost_after_s, and quietly.

    With a failure said first (the learners' collective broke), no store call is made at all.
    """
    server, group = _serve()
    watch = _watch(group, 1, lost_after_s=30.0)
    watch.start()
    try:
        time.sleep(0.3)
        del server
        started = time.monotonic()
        if learners_first:
            watch.failed("learner0: connection closed by peer")
        lost = watch.verdict(10.0)
        took = time.monotonic() - started
    finally:
        watch.close()
    assert lost == f"host 0 lost: the run's store at 127.0.0.1:{group.store_port} refuses connections"
    assert took < 2.0, took
    warnings = capfd.readouterr().err.count("[c10d]")
    assert warnings == 0 if learners_first else warnings <= 1, warnings


def test_a_store_that_goes_away_after_host_0_ended_is_no_loss() -> None:
    """Host 0 left done, then its store went with it: host 1's watch names no one."""
    server, group = _serve()
    host0, host1 = _watch(group, 0), _watch(group, 1)
    host0.start()
    host1.start()
    host0.close()
    try:
        time.sleep(0.5)  # host 1 reads host 0's left/0
        del server
        assert host1.verdict(1.5) is None
    finally:
        host1.close()
