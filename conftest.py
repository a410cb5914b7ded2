"""Repository-wide test guards: no test may leave a child process or a /dev/shm segment behind.

Only what this test session made is judged: its own child processes, and the segments named with its
own ``SHMTX_PREFIX`` (never another process's). A test whose child processes are killed, or run
torchrun, gives them a temporary folder of their own (fixture ``child_tmpdir``), removed after it.

Uses only the standard library (it also runs for ``uv run --exact --package <name>``), and
skips ``gpu``-marked tests where no CUDA device is visible.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# torch.compile's parallel compilation keeps a pool of worker processes alive for the whole
# session; the leak guard below would count (and kill) them, and the next compile would hang on the
# killed pool. Compile in-process during tests.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

# This process's own temporary folder, fixed now: a test that points TMPDIR elsewhere for its children
# (child_tmpdir) must not move the test process's (its fork server's socket, pytest's folders).
tempfile.gettempdir()

_SHM = Path("/dev/shm")
# Every shm-transport segment made by this session's processes (the test process and everything it
# starts, which inherit the variable) carries this session's own name prefix. The guard judges only
# those: a segment of another process on the machine (a training run, another test session, a
# container sharing /dev/shm) is never reported and never removed, whatever its creator's state.
# The engines' start-up sweep likewise only sweeps this prefix. torch's own files (``torch_<pid>_*``,
# CUDA-IPC reference counts) are torch's to release and are not judged here.
SESSION_PREFIX = f"shmtx-test{os.getpid()}-"
os.environ["SHMTX_PREFIX"] = SESSION_PREFIX


# Session-long helpers that libraries start on first use, as children of the test process. Killing one
# breaks every later use in the session: torch's shared-memory manager (started by the first CUDA-IPC
# or file-descriptor share) hangs the next share when it is gone, and multiprocessing's fork server
# (started by the first asynchronous run: Note [fork server] in fastsac_async.parent.fork_server) forks
# the workers of every later run. The workers it forks are judged like any other child.
_SESSION_DAEMONS = ("torch_shm_manager",)
_SESSION_DAEMON_ARGS = (b"from multiprocessing.forkserver import main",)


def _is_session_daemon(pid: int) -> bool:
    """A helper of the session: one whose program is a daemon's, or a fork server the test process started.

    A worker forked by the fork server keeps the server's command line, so a server is recognised as
    a child of the test process itself; its workers (its children) are judged like any other.
    """
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return False
    argv0 = cmdline.split(b"\0", 1)[0].decode(errors="replace")
    if Path(argv0).name in _SESSION_DAEMONS:
        return True
    return parent == os.getpid() and any(arg in cmdline for arg in _SESSION_DAEMON_ARGS)


def _shm_entries() -> set[str]:
    """This session's shm-transport segments in /dev/shm."""
    try:
        return {p.name for p in _SHM.iterdir() if p.name.startswith(SESSION_PREFIX)}
    except FileNotFoundError:
        return set()


def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (read from /proc; zombies excluded)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        nxt = {child for child, parent in parents.items() if parent in frontier} - found
        found |= nxt
        frontier = nxt
    return found


@pytest.fixture(scope="session", autouse=True)
def _resource_tracker() -> None:
    """Start multiprocessing's resource tracker up front: it lives for the whole session by design.

    Started lazily by the first test that spawns, it would otherwise count as that test's leak.
    """
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()


@pytest.fixture(autouse=True)
def _no_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    shm_before = _shm_entries()
    children_before = _children(os.getpid())
    yield
    deadline = time.monotonic() + 10.0
    while True:
        leaked_procs = {
            pid for pid in _children(os.getpid()) - children_before if not _is_session_daemon(pid)
        }
        leaked_shm = _shm_entries() - shm_before
        if not (leaked_procs or leaked_shm) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in leaked_procs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for name in leaked_shm:
        (_SHM / name).unlink(missing_ok=True)
    problems = []
    if leaked_procs:
        problems.append(f"left child processes running: {sorted(leaked_procs)} (killed)")
    if leaked_shm:
        problems.append(f"left /dev/shm entries: {sorted(leaked_shm)} (removed)")
    if problems:
        pytest.fail(f"{request.node.nodeid} " + "; ".join(problems), pytrace=False)


@pytest.fixture
def child_tmpdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The TMPDIR of the processes this test starts: a folder of its own under /tmp, removed after it.

    A process killed by a signal cannot remove its temporary files (multiprocessing's ``pymp-*`` folder,
    wandb's media folders), and torchrun never removes its ``torchelastic_*`` logs: here they go with
    the test. Short, under /tmp: a fork server's socket path in it must fit AF_UNIX's 107 bytes.
    """
    path = Path(tempfile.mkdtemp(prefix="fastsac-test-", dir="/tmp" if os.path.isdir("/tmp") else None))
    monkeypatch.setenv("TMPDIR", str(path))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu`` tests when no CUDA device is visible."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        skip = pytest.mark.skip(reason="needs a CUDA device (run on the GPU machine)")
        for item in gpu_items:
            item.add_marker(skip)
