"""The janitor: a small process that removes what a run left in /dev/shm when its parent dies.

# Note [janitor]
The parent unlinks every segment and semaphore name once all workers attached (Note [engine
lifecycle]), but three things can outlive a parent that is SIGKILLed: the names of a run killed
during boot, torch's CUDA-IPC reference-count files (``/dev/shm/torch_<pid>_<n>_<k>``), which
torch removes only when the sharing process exits normally, and the CUDA driver's files of
interprocess events (``/dev/shm/cuda.shm.<x>.<pid, hex>.<n>``), which outlive even a clean run (see
Note [CUDA event files]). Nobody of the run is left to remove
them: the workers die with the parent (``PR_SET_PDEATHSIG``), and multiprocessing's resource
tracker, which would unlink the semaphores, is in the parent's process group, which a job's kill
reaches as a whole. So the parent starts one janitor first, detached from the terminal and the
process group by ``setsid`` (a terminal's Ctrl+C, a hang-up or a kill of the group does not reach
it), talking to it over a pipe:

* ``pid N`` for every worker it spawns;
* ``sem NAME`` for every POSIX semaphore the parent made for the run (its queues and handshake),
  ``unsem NAME`` once the parent unlinked it itself (:meth:`Janitor.unlink_semaphores`);
* ``done`` when the run ended normally: the janitor removes the torch and CUDA event files of
  workers that have exited (their CUDA-IPC shares are over) and exits;
* end of file without ``done``: the parent died, or is dying. The kernel closes a SIGKILLed
  process's files before it turns zombie, so the parent may still look alive at end of file (in
  5 of 13 kills measured on a 2-core machine); the janitor waits (bounded, ``_PARENT_EXIT_WAIT_S``)
  for it to be gone. A parent still there then lives on (it dropped the pipe before ``done``): only
  the exited workers' torch files go. A parent gone: the janitor waits (bounded) until every worker
  it was told of has exited, then removes the parent's segment names (``<prefix><parent pid>-*``),
  the torch and CUDA event files of the parent and of every worker, and the semaphores still named
  to it, and exits.

It only ever removes files whose creator pid is dead and is one of this run's processes (and, for
the CUDA event files, that belong to this user and were last written at or after the run's start).

# Note [CUDA event files]
A learner shares its CUDA-IPC ring and weight slots through torch's CUDA reducer, which makes an
interprocess CUDA event for each shared storage and exports it (``cudaIpcGetEventHandle``). The
CUDA driver backs an exported event with a small file in /dev/shm named
``cuda.shm.<x>.<pid>.<n>``, three hex fields, the second the pid of the exporting process (the
format ``/cuda.shm.%x.%x.%llx`` is in the CUDA libraries; the driver needs /dev/shm shared for
event handles to open, unlike memory handles). The driver does not remove it when the process
exits, so each CUDA run of the learner left some behind (issue #31). They are ours to remove
once the learner that made them has exited: only processes of the run were given the handles,
and a consumer still running keeps its mapping of an unlinked file. The pid field alone does not
make a file ours: containers that share /dev/shm and the uid have their own pid namespaces, so a
live process of another container can carry the number of our exited worker. A file of ours is
written after the run started (its workers' CUDA set-up takes seconds), so a file with an older
mtime is never removed; the parent passes its wall-clock time at :meth:`Janitor.start`.

The janitor imports nothing but the standard library and runs as a script (``python janitor.py``),
so it starts in tens of milliseconds and holds no torch state. A janitor that is itself SIGKILLed
(a kill of the whole cgroup, as systemd-oomd or a container's OOM group kill does) leaves the next
run's start-up sweep as the backstop for segment names, and a run killed during boot then leaves
its semaphores.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = ["Janitor", "cuda_event_file_pid", "pid_alive"]

SHM_DIR = Path("/dev/shm")
_PARENT_EXIT_WAIT_S = 10.0
"""Longest wait, once the pipe closed without ``done``, for the parent to be gone (dead or zombie)."""
_WORKERS_EXIT_WAIT_S = 60.0
"""Longest wait, after the parent died, for its workers to exit before cleaning up regardless."""


class Janitor:
    """The parent's handle on its janitor process (Note [janitor]).

    Args:
        process: The janitor process (started by :meth:`start`).
    """

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process
        self._pipe: IO[bytes] | None = process.stdin
        self._semaphores: dict[str, Callable[[], object]] = {}
        """Each semaphore made in :meth:`semaphores_made` and not unlinked yet: its name, its finalizer."""

    @classmethod
    def start(cls, prefix: str) -> Janitor:
        """Start the janitor of this (parent) process; ``prefix`` is the segment name prefix in force."""
        started = repr(time.time())  # before any worker: Note [CUDA event files]
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", __file__, str(os.getpid()), prefix, started],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        return cls(process)

    def watch(self, pid: int | None) -> None:
        """Tell the janitor about a worker process."""
        self._send(f"pid {pid}\n" if pid else "")

    @contextlib.contextmanager
    def semaphores_made(self) -> Iterator[None]:
        """Tell the janitor the name of every semaphore this process makes inside the block.

        multiprocessing gives each new named semaphore a finalizer that unlinks the name (when the
        semaphore is garbage-collected, or at exit); inside the block each is also named to the
        janitor, and its finalizer kept for :meth:`unlink_semaphores`. Use it in the parent's main
        thread.
        """
        from multiprocessing import synchronize, util

        finalize = util.Finalize

        def finalize_and_tell(
            obj: object,
            callback: Callable[..., object],
            args: Sequence[Any] = (),
            kwargs: dict[str, Any] | None = None,
            exitpriority: int | None = None,
        ) -> Callable[[], object]:
            finalizer = finalize(obj, callback, args, kwargs, exitpriority)
            if isinstance(obj, synchronize.SemLock) and args:  # SemLock: Finalize(self, _cleanup, (name,))
                self._semaphores[str(args[0])] = finalizer
                self._send(f"sem {args[0]}\n")
            return finalizer

        util.Finalize = finalize_and_tell  # type: ignore[misc, assignment]
        try:
            yield
        finally:
            util.Finalize = finalize  # type: ignore[misc]

    def unlink_semaphores(self) -> None:
        """Unlink the name of every semaphore made in :meth:`semaphores_made` now (idempotent).

        Call it once every process that uses them opened them (every worker is ready), or once none
        will any more: a semaphore keeps working wherever it is open, and its name survives no crash.
        Each goes through multiprocessing's own finalizer (unlink, then unregister from the resource
        tracker), which then does nothing more at garbage collection or exit.
        """
        while self._semaphores:
            name, finalizer = self._semaphores.popitem()
            with contextlib.suppress(OSError):  # already gone: nothing to unlink
                finalizer()
            self._send(f"unsem {name}\n")

    def close(self, timeout_s: float = 5.0) -> None:
        """The run ended normally: the janitor tidies the exited workers' torch files and exits (bounded)."""
        self._send("done\n")
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None
        try:
            self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout_s)

    def _send(self, line: str) -> None:
        if self._pipe is None or not line:
            return
        try:
            self._pipe.write(line.encode())
            self._pipe.flush()
        except (BrokenPipeError, ValueError):  # the janitor is gone: nothing to tell it any more
            self._pipe = None


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs: it exists and is not a zombie (the one rule of the engine's watchers).

    A zombie has exited: its parent has only not reaped it yet. A SIGKILLed run parent stays one until
    its own parent (a shell, a test) waits for it, and a worker watching for it must not wait as long.
    Where ``/proc`` cannot be read (but the pid may exist), the signal probe decides, so a watcher never
    takes an unreadable ``/proc`` for a dead parent. (shm-transport keeps the same rule for its own
    sweeps: it imports nothing of this package, and this module imports nothing of it.)
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process: it exists
            return True
        return True
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _all_exit(pids: set[int], timeout_s: float) -> bool:
    """Wait (bounded) until none of ``pids`` is alive; whether none is."""
    deadline = time.monotonic() + timeout_s
    while any(pid_alive(pid) for pid in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _remove(prefixes: tuple[str, ...]) -> None:
    try:
        entries = list(SHM_DIR.iterdir())
    except OSError:
        return
    for path in entries:
        if path.name.startswith(prefixes):
            with contextlib.suppress(OSError):
                path.unlink()


def _torch_files(pids: set[int]) -> tuple[str, ...]:
    return tuple(f"torch_{pid}_" for pid in pids if not pid_alive(pid))


def cuda_event_file_pid(name: str) -> int | None:
    """The exporting process's pid in a CUDA event file's name (Note [CUDA event files]); else None."""
    parts = name.split(".")
    if len(parts) != 5 or parts[:2] != ["cuda", "shm"]:
        return None
    try:
        return int(parts[3], 16)
    except ValueError:
        return None


def _remove_cuda_event_files(pids: set[int], started: float) -> None:
    """Remove this user's CUDA event files of the exited processes among ``pids`` written since ``started``.

    Note [CUDA event files]: a file older than the run is a stranger's whose pid number matches.
    """
    exited = {pid for pid in pids if not pid_alive(pid)}
    try:
        entries = list(SHM_DIR.glob("cuda.shm.*"))
    except OSError:
        return
    for path in entries:
        with contextlib.suppress(OSError):
            if cuda_event_file_pid(path.name) not in exited:
                continue
            stat = path.stat()
            if stat.st_uid == os.getuid() and stat.st_mtime >= started:
                path.unlink()


def _remove_files_of(pids: set[int], started: float, *prefixes: str) -> None:
    """Remove the torch and CUDA event files of the exited processes among ``pids``, and ``prefixes``."""
    _remove((*prefixes, *_torch_files(pids)))
    _remove_cuda_event_files(pids, started)


def main(argv: list[str]) -> int:
    """The janitor process: ``janitor.py <parent pid> <segment prefix> <run start, time.time()>``.

    Commands come on stdin (Note [janitor]).
    """
    parent, prefix, started = int(argv[1]), argv[2], float(argv[3])
    # A job manager signals every process of the job (Note [worker signals]); the janitor ends on its pipe.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    workers: set[int] = set()
    semaphores: set[str] = set()
    for line in sys.stdin:
        word, _, value = line.strip().partition(" ")
        if word == "pid" and value.isdigit():
            workers.add(int(value))
        elif word in ("sem", "unsem") and value.startswith("/") and "/" not in value[1:]:
            name = f"sem.{value[1:]}"  # POSIX semaphore /NAME is /dev/shm/sem.NAME
            if word == "sem":
                semaphores.add(name)
            else:  # the parent unlinked it itself
                semaphores.discard(name)
        elif word == "done":
            _remove_files_of(workers, started)
            return 0
    # End of file without "done". The kernel closes a killed process's files before it turns zombie,
    # so the parent may still look alive here: give it time to finish dying (Note [janitor]).
    if not _all_exit({parent}, _PARENT_EXIT_WAIT_S):  # it lives on: it dropped the pipe before "done"
        _remove_files_of(workers, started)
        return 0
    # The parent died.
    _all_exit(workers, _WORKERS_EXIT_WAIT_S)
    _remove_files_of(workers | {parent}, started, f"{prefix}{parent}-")
    for name in semaphores:
        with contextlib.suppress(OSError):
            (SHM_DIR / name).unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
