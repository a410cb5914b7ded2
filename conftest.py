"""Repository-wide test guards: no test may leave a child process or a /dev/shm segment behind.

Uses only the standard library (it also runs for ``uv run --exact --package <name>``), and
skips ``gpu``-marked tests where no CUDA device is visible.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# torch.compile's parallel compilation keeps a pool of worker processes alive for the whole
# session; the leak guard below would count (and kill) them, and the next compile would hang on the
# killed pool. Compile in-process during tests.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

_SHM = Path("/dev/shm")
# Kernel/library entries that are not ours: POSIX semaphores of multiprocessing, and the CUDA driver's
# own IPC bookkeeping (``cuda.shm.<uid>.<id>.<n>``, created by the first CUDA-IPC export of a process).
_FOREIGN_SHM_PREFIXES = ("sem.", "cuda.shm.")


def _creator_pid(name: str) -> int | None:
    """The creator pid encoded in a segment name (``shmtx-<pid>-<hex>``, torch's ``torch_<pid>_...``)."""
    for sep, prefix in (("-", "shmtx"), ("_", "torch")):
        parts = name.split(sep)
        if len(parts) >= 3 and parts[0] == prefix and parts[1].isdigit():
            return int(parts[1])
    return None


def _is_foreign(name: str, ours: set[int]) -> bool:
    """True for a segment whose creator is alive and outside this test process tree.

    Several sessions may share one machine; their live segments are none of this test's business,
    and removing them would break them.
    """
    pid = _creator_pid(name)
    if pid is None or not Path(f"/proc/{pid}").exists():
        return False
    # torch's CUDA-IPC reference-count files are torch's to release (when the last storage that
    # crossed processes is freed), even in this very process: removing them breaks torch.
    return name.startswith("torch_") or pid not in ours


# Session-long helpers that libraries start on first use, as children of the test process. Killing one
# breaks every later use in the session: torch's shared-memory manager (started by the first CUDA-IPC
# or file-descriptor share) hangs the next share when it is gone.
_SESSION_DAEMONS = ("torch_shm_manager",)


def _is_session_daemon(pid: int) -> bool:
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return False
    return Path(argv0).name in _SESSION_DAEMONS


def _shm_entries() -> set[str]:
    try:
        return {p.name for p in _SHM.iterdir() if not p.name.startswith(_FOREIGN_SHM_PREFIXES)}
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
        ours = {os.getpid()} | _children(os.getpid())
        leaked_shm = {n for n in _shm_entries() - shm_before if not _is_foreign(n, ours)}
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
