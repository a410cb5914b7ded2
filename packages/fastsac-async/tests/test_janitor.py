"""The janitor removes what a SIGKILLed parent left in /dev/shm, and only that (Note [janitor])."""

import gc
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fastsac_async.parent import janitor as janitor_module
from fastsac_async.parent.janitor import Janitor
from fastsac_async.testing import janitor_parent
from shm_transport import default_prefix

SHM = Path("/dev/shm")


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.slow
def test_after_the_parents_sigkill_its_names_and_torch_files_go_once_its_workers_exit(tmp_path: Path) -> None:
    """SIGKILL the parent: its segment name and its and its worker's torch files are removed; others stay."""
    stranger = SHM / f"torch_{_dead_pid()}_33_0"  # a dead process that is not of this run
    stranger.write_bytes(b"x")
    pid_file = tmp_path / "pids"
    parent = mp.get_context("spawn").Process(
        target=janitor_parent, kwargs={"prefix": default_prefix(), "pid_file": pid_file}
    )
    parent.start()
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists():
            assert time.monotonic() < deadline and parent.is_alive()
            time.sleep(0.05)
        me, worker = (int(x) for x in pid_file.read_text().split())
        ours = [
            SHM / f"{default_prefix()}{me}-a1b2c3",
            SHM / f"torch_{me}_11_0",
            SHM / f"torch_{worker}_22_0",
        ]
        assert all(p.exists() for p in ours)
        os.kill(me, signal.SIGKILL)
        parent.join(10)
        time.sleep(0.5)
        if Path(f"/proc/{worker}").exists():  # the worker sleeps 2 s: nothing goes while it lives
            assert all(p.exists() for p in ours), "the janitor waits for the run's workers first"
        deadline = time.monotonic() + 20  # the worker sleeps 2 s: the janitor waits for it first
        while any(p.exists() for p in ours) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p.name for p in ours if p.exists()]
        assert stranger.exists(), "a file of a process outside the run is not the janitor's"
    finally:
        if parent.is_alive():
            parent.kill()
            parent.join(10)
        stranger.unlink(missing_ok=True)


def test_a_normal_close_tidies_exited_workers_and_leaves_the_living_parents_files() -> None:
    """close(): a finished worker's torch file goes; the (living) parent's names stay; the janitor exits."""
    dead = _dead_pid()
    theirs, mine = SHM / f"torch_{dead}_1_0", SHM / f"{default_prefix()}{os.getpid()}-d0d0d0"
    for path in (theirs, mine):
        path.write_bytes(b"x")
    try:
        janitor = Janitor.start(default_prefix())
        janitor.watch(dead)
        started = time.monotonic()
        janitor.close()
        assert time.monotonic() - started < 5.0
        assert not theirs.exists() and mine.exists()
    finally:
        theirs.unlink(missing_ok=True)
        mine.unlink(missing_ok=True)


def test_a_normal_close_removes_the_cuda_event_files_of_exited_workers_only() -> None:
    """close(): an exited worker's cuda.shm.<x>.<pid hex>.<n> files from the run go; older, others' stay."""
    worker, stranger = _dead_pid(), _dead_pid()
    theirs = [SHM / f"cuda.shm.{os.getuid():x}.{worker:x}.{n:x}" for n in (1, 2)]
    older = SHM / f"cuda.shm.{os.getuid():x}.{worker:x}.3"  # another pid namespace's process, same number
    others = [
        SHM / f"cuda.shm.{os.getuid():x}.{stranger:x}.1",
        SHM / f"cuda.shm.{worker:x}.not-a-pid.1",
        older,
    ]
    try:
        assert janitor_module.cuda_event_file_pid(theirs[0].name) == worker
        janitor = Janitor.start(default_prefix())
        for path in (*theirs, *others):
            path.write_bytes(b"x")
        now = time.time()
        for path in theirs:  # written by the worker after the run started
            os.utime(path, (now + 1.0, now + 1.0))
        os.utime(older, (now - 3600.0, now - 3600.0))  # written before the run started
        janitor.watch(worker)
        janitor.close()
        assert not [p.name for p in theirs if p.exists()]
        assert all(p.exists() for p in others), "a file of a process outside the run is not the janitor's"
    finally:
        for path in (*theirs, *others):
            path.unlink(missing_ok=True)


def test_an_end_of_file_just_before_the_parents_death_still_gets_the_cleanup() -> None:
    """The pipe closes 0.5 s before the parent dies (a SIGKILL's order, slowed): the janitor still cleans."""
    parent = subprocess.Popen(["sleep", "60"])  # the janitor's parent in all but name: it judges it by pid
    name = f"mp-test{os.getpid()}-{parent.pid}"
    ours = [
        SHM / f"{default_prefix()}{parent.pid}-e0f0e0",
        SHM / f"torch_{parent.pid}_44_0",
        SHM / f"sem.{name}",
    ]
    for path in ours:
        path.write_bytes(b"x")
    started = repr(time.time())
    command = [
        sys.executable,
        "-I",
        "-S",
        janitor_module.__file__,
        str(parent.pid),
        default_prefix(),
        started,
    ]
    janitor = subprocess.Popen(command, stdin=subprocess.PIPE)
    try:
        assert janitor.stdin is not None
        janitor.stdin.write(f"sem /{name}\n".encode())
        janitor.stdin.close()  # end of file without "done", the parent still running
        time.sleep(0.5)
        assert janitor.poll() is None and all(p.exists() for p in ours), "nothing goes while the parent runs"
        parent.kill()
        parent.wait(10)
        assert janitor.wait(10) == 0
        assert not [p.name for p in ours if p.exists()]
    finally:
        for proc in (parent, janitor):
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for path in ours:
            path.unlink(missing_ok=True)


def test_semaphores_made_in_the_block_lose_their_names_on_unlink_and_keep_working() -> None:
    """unlink_semaphores(): the block's semaphore names leave /dev/shm; the semaphores still work, once."""
    janitor = Janitor.start(default_prefix())
    try:
        with janitor.semaphores_made():
            lock = mp.get_context("spawn").Lock()
        outside = mp.get_context("spawn").Lock()  # made after the block: not the janitor's
        names = [SHM / f"sem.{semaphore._semlock.name[1:]}" for semaphore in (lock, outside)]  # type: ignore[attr-defined]
        assert all(path.exists() for path in names)
        janitor.unlink_semaphores()
        janitor.unlink_semaphores()  # idempotent
        assert not names[0].exists() and names[1].exists()
        assert lock.acquire(timeout=1.0)
        lock.release()
        del lock, outside  # multiprocessing's finalizers: the first has run already, the second unlinks
        gc.collect()
        assert not names[1].exists()
    finally:
        janitor.close()


def test_a_zombie_counts_as_exited_and_a_running_process_as_alive() -> None:
    """pid_alive: a child that exited but is not reaped yet is gone; this process and a sleeper run."""
    from fastsac_async.parent.janitor import pid_alive

    sleeper = subprocess.Popen(["sleep", "30"])
    quick = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{quick.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child exits"
            time.sleep(0.02)
        assert not pid_alive(quick.pid), "a zombie has exited"
        assert pid_alive(os.getpid()) and pid_alive(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait(10)
        quick.wait(10)
    assert not pid_alive(quick.pid) and not pid_alive(sleeper.pid)
