import dataclasses
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import torch._inductor.config as inductor_config

from fastsac_async import AsyncOptions, EngineSpec, TrainingRun
from fastsac_async.learner.cpu_loan import borrowed_cpus, compile_cpus
from fastsac_async.testing import FakeEnvFactory, cpu_topology
from fastsac_core import FastSACConfig
from fastsac_topology import LearnerPlacement

CPUS = sorted(os.sched_getaffinity(0))
needs_two_cpus = pytest.mark.skipif(len(CPUS) < 2, reason="needs 2 CPUs to lend one")


@pytest.fixture
def on_one_cpu() -> Iterator[int]:
    """This thread pinned to its first CPU for the test, its affinity restored afterwards."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {CPUS[0]})
    try:
        yield CPUS[0]
    finally:
        os.sched_setaffinity(0, before)


@needs_two_cpus
def test_the_block_runs_on_the_lent_cpus_and_everything_is_restored(on_one_cpu: int) -> None:
    """Inside: the thread's own and the lent CPUs, that many compile workers; after: both as before."""
    threads_before = inductor_config.compile_threads
    with borrowed_cpus([CPUS[1]]) as count:
        assert os.sched_getaffinity(0) == {on_one_cpu, CPUS[1]}
        assert count == 2 and inductor_config.compile_threads == 2
    assert os.sched_getaffinity(0) == {on_one_cpu}
    assert inductor_config.compile_threads == threads_before


@needs_two_cpus
def test_an_error_in_the_block_still_restores_the_affinity(on_one_cpu: int) -> None:
    """A failing compile gives the lent CPUs back and propagates its own error."""
    with pytest.raises(RuntimeError, match="compile failed"), borrowed_cpus(CPUS[:2]):
        raise RuntimeError("compile failed")
    assert os.sched_getaffinity(0) == {on_one_cpu}


def test_nothing_to_lend_changes_nothing() -> None:
    """None, or only the thread's own CPUs: no affinity or compile-worker change."""
    own = os.sched_getaffinity(0)
    threads = inductor_config.compile_threads
    for cpus in (None, sorted(own)):
        with borrowed_cpus(cpus) as count:
            assert count == len(own) and os.sched_getaffinity(0) == own
            assert inductor_config.compile_threads == threads


@needs_two_cpus
def test_compile_workers_started_inside_are_gone_after(on_one_cpu: int) -> None:
    """The compile-worker pool inductor starts inside (at its first compile) is shut down at the end."""
    from torch._inductor.async_compile import AsyncCompile

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    start_method = inductor_config.worker_start_method
    with borrowed_cpus(CPUS[:2]):
        AsyncCompile.warm_pool()  # what inductor's first compile does with more than one compile thread
        AsyncCompile.use_process_pool()
        AsyncCompile.wait_pool_ready(timeout=60)
        workers = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        assert len(workers) >= 3, "a sidecar and its 2 compile workers"
        assert all(set(p.cpu_affinity()) == set(CPUS[:2]) for p in workers), "workers run on the lent CPUs"
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, f"compile workers still running: {[p.pid for p in alive]}"
    assert inductor_config.worker_start_method == start_method


@needs_two_cpus
def test_threads_started_inside_get_the_lent_cpus_back(on_one_cpu: int) -> None:
    """A thread born in the window (autograd's device thread) runs on the lent CPUs, then on ours only."""
    started, release = threading.Event(), threading.Event()
    seen: list[set[int]] = []

    def run() -> None:
        seen.append(os.sched_getaffinity(0))
        started.set()
        release.wait(10)

    thread = threading.Thread(target=run)
    with borrowed_cpus(CPUS[:2]):
        thread.start()
        assert started.wait(10)
    try:
        assert seen == [set(CPUS[:2])]
        assert thread.native_id is not None and os.sched_getaffinity(thread.native_id) == {on_one_cpu}
    finally:
        release.set()
        thread.join(10)


@needs_two_cpus
def test_a_compile_beside_the_main_thread_lends_every_other_thread_the_cpus(on_one_cpu: int) -> None:
    """beside_main, from a helper thread: the other threads (autograd's) borrow too, the main one never."""
    release = threading.Event()
    bystander = threading.Thread(target=release.wait, args=(10,))  # an existing thread, as autograd's
    bystander.start()
    seen: dict[str, set[int]] = {}

    def compile_thread() -> None:
        with borrowed_cpus(CPUS[1:2], beside_main=True):
            assert bystander.native_id is not None and threading.main_thread().native_id is not None
            seen["bystander"] = os.sched_getaffinity(bystander.native_id)
            seen["main"] = os.sched_getaffinity(threading.main_thread().native_id)
        assert bystander.native_id is not None
        seen["bystander after"] = os.sched_getaffinity(bystander.native_id)

    helper = threading.Thread(target=compile_thread)
    try:
        helper.start()
        helper.join(30)
    finally:
        release.set()
        bystander.join(10)
    wide, own = {on_one_cpu, CPUS[1]}, {on_one_cpu}
    assert seen == {"bystander": wide, "main": own, "bystander after": own}


def _spec(tmp_path: Path, *, device: str, learner_cpus: tuple[int, ...] | None, compile: bool) -> EngineSpec:
    factory = FakeEnvFactory()
    topo = cpu_topology(num_envs=8, num_collectors=2, num_learners=1, batch_size=16)
    topo = dataclasses.replace(
        topo,
        learners=(LearnerPlacement(rank=0, device=device, numa_node=None, cpus=learner_cpus),),
        collectors=tuple(dataclasses.replace(c, cpus=(10 + c.index,)) for c in topo.collectors),
    )
    return EngineSpec(
        run=TrainingRun(env_factory=factory, dims=factory(1, 0).dims, seed=0, num_iterations=10,
                        logging_interval=5, save_interval=0, run_dir=tmp_path),
        topology=topo, agent=FastSACConfig(batch_size=16, buffer_size=64, compile=compile),
        options=AsyncOptions(num_collectors=2),
    )  # fmt: skip


def test_a_pinned_compiling_gpu_learner_borrows_its_collectors_cpus(tmp_path: Path) -> None:
    """Its own CPUs plus its collectors'; None when unpinned, on CPU, or not compiling."""
    pinned = _spec(tmp_path, device="cuda:0", learner_cpus=(0, 1), compile=True)
    assert compile_cpus(pinned, 0) == (0, 1, 10, 11)
    assert compile_cpus(_spec(tmp_path, device="cuda:0", learner_cpus=None, compile=True), 0) is None
    assert compile_cpus(_spec(tmp_path, device="cpu", learner_cpus=(0, 1), compile=True), 0) is None
    assert compile_cpus(_spec(tmp_path, device="cuda:0", learner_cpus=(0, 1), compile=False), 0) is None
