import contextlib
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fastsac_async.parent.fork_server import fork_server, stop_fork_server
from fastsac_async.parent.janitor import pid_alive
from fastsac_async.parent.supervisor import Supervisor, WorkerExit
from fastsac_async.run_layout import RunLayout
from fastsac_async.testing import (
    UnpickledVariable,
    failing_worker,
    orphaning_parent,
    probing_worker,
    sleeping_worker,
)
from fastsac_async.worker_process import RecordedException, record_failure, recorded_exception
from fastsac_core import EnvCall, EnvCallError


@pytest.fixture
def own_fork_server() -> None:
    """No fork server of this process runs (a test's own supervisor starts one as it would on its own).

    The server is per process and the first start decides its imports: an earlier test's server may be
    a trainer's, which with FASTSAC_PRELOAD_DYNAMO=0 leaves dynamo to the learner (LEARNER_PRELOAD).
    None of its workers is alive between tests.
    """
    pid = fork_server()._forkserver_pid
    if pid is not None:
        stop_fork_server(pid)


def _wait_exit(sup: Supervisor, timeout_s: float) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        exits = sup.new_exits()
        if exits:
            return [e.name for e in exits]
        sup.wait(0.1)
    return []


def test_exception_writes_traceback_and_names_the_worker(tmp_path: Path) -> None:
    """A raising worker exits 1, its error log holds the traceback, and the failure names both."""
    sup = Supervisor(tmp_path)
    sup.spawn("collector3", failing_worker, {"message": "boom in env\nmore of it"}, threads=1)
    assert _wait_exit(sup, 60) == ["collector3"]
    assert sup.exitcode("collector3") == 1
    error_log = RunLayout(tmp_path).error_log("collector3")
    text = error_log.read_text()
    assert "Traceback" in text and "RuntimeError: boom in env\nmore of it" in text
    failure = sup.failure(WorkerExit("collector3", sup.exitcode("collector3")))
    assert failure.error == "RuntimeError: boom in env", "the exception's type and first line"
    message = str(failure)
    assert message.startswith("worker collector3 raised RuntimeError: boom in env (exited with code 1); ")
    assert str(error_log) in message
    assert "boom in env" in RunLayout(tmp_path).log("collector3").read_text()


def _raised(error: BaseException) -> BaseException:
    """``error`` as a worker catches it: raised, with its traceback."""
    try:
        raise error
    except BaseException as caught:
        return caught


def test_the_error_log_header_marks_an_envs_exception_and_no_wording_can_pass_for_one(
    tmp_path: Path,
) -> None:
    """A type named with ``<locals>`` in it still says "raised"; an env's line (EnvCall's) says it itself."""

    class StoreLostError(RuntimeError):
        pass

    sup = Supervisor(tmp_path)
    error_log = RunLayout(tmp_path).error_log("learner0")
    record_failure(tmp_path, "learner0", _raised(StoreLostError("the store is gone")))
    recorded = recorded_exception(error_log)
    assert recorded is not None and not recorded.in_env, recorded
    assert recorded.line.endswith("<locals>.StoreLostError: the store is gone"), recorded.line
    message = str(sup.failure(WorkerExit("learner0", 1)))
    assert message.startswith(f"worker learner0 raised {recorded.line} (exited with code 1); "), message

    class Env:
        env_id = "Pendulum-v1"

    def step() -> None:  # the env's own code, one frame below the caller
        raise ValueError("bad action")

    with pytest.raises(EnvCallError) as caught, EnvCall(Env(), "step"):  # type: ignore[arg-type]
        step()
    env_error = caught.value
    assert str(env_error).startswith("Pendulum-v1's step() raised ValueError: bad action (raised at ")
    record_failure(tmp_path, "collector0", env_error)
    error_log = RunLayout(tmp_path).error_log("collector0")
    header = error_log.read_text().splitlines()[0]
    assert header == f"collector0 (pid {os.getpid()}) failed in its env: {env_error}", header
    assert recorded_exception(error_log) == RecordedException(str(env_error), in_env=True)
    message = str(sup.failure(WorkerExit("collector0", 1)))
    assert message.startswith(f"worker collector0 failed: {env_error} (exited with code 1); "), message


def test_sigkill_is_reported_as_a_signal_and_shutdown_is_bounded(tmp_path: Path) -> None:
    """SIGKILL of one worker is seen at once; shutdown stops the other within the bound."""
    stale = RunLayout(tmp_path).error_log("collector0")  # an earlier launch's, in the same run folder
    stale.parent.mkdir(parents=True)
    stale.write_text("collector0 (pid 1) failed: ValueError: of another launch\n")
    sup = Supervisor(tmp_path)
    sup.spawn("learner0", sleeping_worker, {"seconds": 120.0}, threads=1)
    sup.spawn("collector0", sleeping_worker, {"seconds": 120.0}, threads=1)
    log = RunLayout(tmp_path).log("collector0")
    deadline = time.monotonic() + 60
    while "sleeping" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "sleeping" in log.read_text(), "stdout of the worker reaches its log file"
    pid = sup.pid("collector0")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    assert _wait_exit(sup, 10) == ["collector0"]
    message = str(sup.failure(WorkerExit("collector0", sup.exitcode("collector0"))))
    assert "killed by signal 9" in message and "no traceback" in message
    assert "another launch" not in message
    start = time.monotonic()
    sup.shutdown([["collector0"], ["learner0"]], timeout_s=1.0, before_group=lambda i: None)
    # The worst case is join (1 s), stack dump (0.2 s), kill and join (2 s): 3.2 s, plus slack for
    # a loaded machine.
    assert time.monotonic() - start < 10.0
    assert sup.alive() == []
    sup.shutdown([["learner0"]], timeout_s=1.0, before_group=lambda i: None)  # idempotent


def test_a_dead_fork_server_is_named(tmp_path: Path) -> None:
    """Killing the fork server kills its workers; the failure names the server, not a bare exit 255."""
    sup = Supervisor(tmp_path)
    sup.spawn("collector0", sleeping_worker, {"seconds": 120.0}, threads=1)
    server = fork_server()._forkserver_pid
    assert server is not None
    os.kill(server, signal.SIGKILL)
    assert _wait_exit(sup, 30) == ["collector0"]
    message = str(sup.failure(WorkerExit("collector0", sup.exitcode("collector0"))))
    assert f"the fork server (pid {server}) that started the workers was killed by signal 9" in message
    sup.shutdown([["collector0"]], timeout_s=1.0, before_group=lambda i: None)
    later = Supervisor(tmp_path / "later")  # the next run starts a new server
    later.spawn("collector0", sleeping_worker, {"seconds": 0.0}, threads=1)
    assert _wait_exit(later, 60) == ["collector0"] and later.exitcode("collector0") == 0


def test_worker_dies_with_its_parent(tmp_path: Path) -> None:
    """SIGKILL of the parent takes its worker down (PR_SET_PDEATHSIG / watchdog): no orphan."""
    ctx = mp.get_context("spawn")
    pid_file = tmp_path / "pid"
    parent = ctx.Process(target=orphaning_parent, kwargs={"run_dir": tmp_path, "pid_file": pid_file})
    parent.start()
    try:
        deadline = time.monotonic() + 90
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        worker_pid = int(pid_file.read_text())
        assert pid_alive(worker_pid)
        os.kill(parent.pid, signal.SIGKILL)  # type: ignore[arg-type]
        parent.join(10)
        deadline = time.monotonic() + 5
        while pid_alive(worker_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(worker_pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            parent.kill()
        parent.join(5)


def test_workers_ignore_stop_signals_from_birth_and_a_stuck_one_is_killed_with_its_stacks(
    tmp_path: Path,
) -> None:
    """Stop signals sent while a worker still imports never kill it; shutdown dumps its stacks, kills it."""
    sup = Supervisor(tmp_path)
    sup.spawn("collector0", sleeping_worker, {"seconds": 120.0}, threads=1)
    pid = sup.pid("collector0")
    assert pid is not None
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR1):
        os.kill(pid, sig)  # the worker is still starting: the signals are blocked, then ignored
    log = RunLayout(tmp_path).log("collector0")
    deadline = time.monotonic() + 60
    while "sleeping" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.05)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR1):
        os.kill(pid, sig)
    time.sleep(0.3)
    assert sup.alive() == ["collector0"] and sup.new_exits() == []
    start = time.monotonic()
    assert sup.shutdown([["collector0"]], timeout_s=0.5, before_group=lambda i: None) == ["collector0"]
    assert time.monotonic() - start < 5.0
    assert sup.exitcode("collector0") == -signal.SIGKILL
    assert "most recent call first" in log.read_text(), "the stack dump reaches the worker's log"


def test_shutdown_skips_workers_that_were_never_spawned_and_hurry_ends_the_joins(tmp_path: Path) -> None:
    """Shutdown with names never spawned (a boot cut short) still stops the rest; hurry skips the grace."""
    sup = Supervisor(tmp_path)
    sup.spawn("learner0", sleeping_worker, {"seconds": 120.0}, threads=1)
    start = time.monotonic()
    killed = sup.shutdown(
        [["collector0", "collector1"], ["learner0"]], timeout_s=60.0, before_group=lambda i: None,
        hurry=lambda: True,
    )  # fmt: skip
    assert killed == ["learner0"] and sup.alive() == []
    assert time.monotonic() - start < 5.0


def test_workers_are_forked_from_a_server_that_already_loaded_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_fork_server: None
) -> None:
    """A worker is a fork of one preloaded server, with its own threads and the parent's environment now."""
    import json

    monkeypatch.delenv("FASTSAC_TEST_PROBE", raising=False)
    sup = Supervisor(tmp_path)
    outs = {name: tmp_path / f"{name}.json" for name in ("collector0", "learner0")}
    for (name, out), threads in zip(outs.items(), (1, 2), strict=True):
        sup.spawn(name, probing_worker, {"out": out, "unpickled": UnpickledVariable()}, threads=threads)
        monkeypatch.setenv("FASTSAC_TEST_PROBE", "set after the first start")
    try:
        assert sorted(_wait_exit(sup, 60) + _wait_exit(sup, 60)) == ["collector0", "learner0"]
        facts = {name: json.loads(out.read_text()) for name, out in outs.items()}
    finally:
        sup.shutdown([sup.names], timeout_s=5.0, before_group=lambda i: None)
    assert facts["collector0"]["forked_by"] == facts["learner0"]["forked_by"] != os.getpid()
    assert all(f["forker_loaded_torch"] and f["parent_pid"] == os.getpid() for f in facts.values())
    assert [facts[n]["omp_threads"] for n in outs] == ["1", "2"]
    assert [facts[n]["torch_threads"] for n in outs] == [1, 2]
    assert [facts[n]["probe_variable"] for n in outs] == [None, "set after the first start"]
    # In place before the worker's arguments are unpickled (which imports their modules).
    assert [facts[n]["probe_variable_at_unpickle"] for n in outs] == [None, "set after the first start"]
    # The learner's optimizers import dynamo: the server did, once, for every worker; CUDA it never touches.
    assert all(f["preloaded_dynamo"] and not f["cuda_initialized_at_start"] for f in facts.values())


@pytest.mark.gpu
def test_a_worker_forked_from_the_preloaded_server_starts_without_cuda_and_then_uses_it(
    tmp_path: Path, own_fork_server: None
) -> None:
    """On a GPU host the server's imports (torch, dynamo) leave CUDA alone, so a forked worker can use it."""
    import json

    sup = Supervisor(tmp_path)
    out = tmp_path / "learner0.json"
    sup.spawn("learner0", probing_worker, {"out": out, "unpickled": UnpickledVariable(), "use_cuda": True},
              threads=1)  # fmt: skip
    try:
        assert _wait_exit(sup, 120) == ["learner0"] and sup.exitcode("learner0") == 0
        facts = json.loads(out.read_text())
    finally:
        sup.shutdown([sup.names], timeout_s=5.0, before_group=lambda i: None)
    assert facts["preloaded_dynamo"] and not facts["cuda_initialized_at_start"]
    assert facts["cuda_sum"] == 3.0


_EARLY_SERVER = """
import multiprocessing.forkserver as forkserver
import sys
from fastsac_async import prestart_workers  # what the trainer calls first
from fastsac_async.parent.fork_server import start_fork_server, stop_fork_server
assert "torch" not in sys.modules, "starting the fork server imported torch in the parent"
from fastsac_async.worker_start import STOP_SIGNALS
pid = start_fork_server(["slow_to_import"])
assert pid is not None and forkserver._forkserver._forkserver_pid == pid
status = open(f"/proc/{pid}/status").read()
blocked = int(status.split("SigBlk:")[1].split()[0], 16)
unblocked = [s.name for s in STOP_SIGNALS if not blocked >> (s - 1) & 1]
if unblocked:  # stopped first: the server would hold this script's output open for its 600 s import
    stop_fork_server(pid)
    raise SystemExit(f"the server can die of {unblocked} sent to the process group")
assert start_fork_server() is None, "a running server is kept"
stop_fork_server(pid + 100_000)  # not this process's server: left alone
assert forkserver._forkserver._forkserver_pid == pid
stop_fork_server(pid)  # in the middle of its imports
assert forkserver._forkserver._forkserver_pid is None
print(pid)
"""


def test_a_fork_server_started_early_stops_at_once_in_the_middle_of_its_imports(tmp_path: Path) -> None:
    """No torch imported; the server blocks every stop signal; a second start keeps it; a stop ends it.

    A fresh process, as a trainer is: its resource tracker starts with the server. The stop comes in
    the middle of the server's imports.
    """
    # Its last preload sleeps 600 s: only a kill ends the server before that (closing its pipe would
    # wait for the imports), and the script's bound is far shorter.
    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(600)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", _EARLY_SERVER],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert not pid_alive(int(done.stdout.split()[-1])), "the server was reaped"


def test_the_fork_server_preloads_the_modules_of_the_workers_entry_points() -> None:
    """WORKER_MODULES (torch-free, for the early start) names the modules of the workers' entry points."""
    from fastsac_async.collector.process import run_collector
    from fastsac_async.evaluator.process import run_evaluator
    from fastsac_async.learner.process import run_learner
    from fastsac_async.parent.fork_server import WORKER_MODULES

    assert tuple(f.__module__ for f in (run_learner, run_collector, run_evaluator)) == WORKER_MODULES


def test_every_exported_name_of_the_package_loads_from_its_home() -> None:
    """fastsac_async's lazy exports: __all__ and the table of homes agree, and every name resolves."""
    import fastsac_async

    assert set(fastsac_async.__all__) == set(fastsac_async._HOME_OF)
    for name in fastsac_async.__all__:
        getattr(fastsac_async, name)  # AttributeError if its home lacks it
        assert name in dir(fastsac_async)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        fastsac_async.nothing_here  # noqa: B018
