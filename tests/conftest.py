"""The end checks of every fault test (fixture ``run_end``).

No process of the run alive, no segment of the run left in /dev/shm, the named worker, the exit code,
and the time to stop.

A run's own /dev/shm names are told apart from every other process's without touching any: its
segments carry their creator's pid, and the rest (multiprocessing's semaphores, ``sem.mp-<random>``)
are the names the run's processes map, read from ``/proc/<pid>/maps`` while they live.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Collection
from pathlib import Path

import pytest

from fastsac_async.run_layout import RunLayout
from shm_transport import list_segments

_SHM = Path("/dev/shm")
_log = logging.getLogger("fault_end")


def _state(pid: int) -> str | None:
    """The process state letter of ``pid`` (``R``, ``S``, ``Z``...), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _alive(pid: int) -> bool:
    return _state(pid) not in (None, "Z", "X")


def _segments_of(owners: set[int]) -> list[str]:
    """Names in /dev/shm made by ``owners``: shm-transport's (``$SHMTX_PREFIX<pid>-...``), torch's."""
    found = [s.name for s in list_segments() if s.creator_pid in owners]
    for entry in _SHM.iterdir():
        parts = entry.name.split("_")
        if len(parts) >= 3 and parts[0] == "torch" and parts[1].isdigit() and int(parts[1]) in owners:
            found.append(entry.name)
    return sorted(found)


class RunEnd:
    """What every fault test checks at its end (use through the ``run_end`` fixture)."""

    @staticmethod
    def worker_pids(run_dir: Path) -> dict[str, int]:
        """The pid of each worker of the run in ``run_dir`` (the last ``<worker> started (pid N`` of its log).

        Anchored on the worker's name: a learner's log also holds its compile warmer's ``started (pid``.
        """
        pids: dict[str, int] = {}
        for log in sorted(RunLayout(run_dir).logs.glob("*.log")):
            found = re.findall(rf"{re.escape(log.stem)} started \(pid (\d+)", log.read_text(errors="replace"))
            if found:
                pids[log.stem] = int(found[-1])
        return pids

    @staticmethod
    def process_tree(pid: int) -> set[int]:
        """``pid`` and its live descendants, read from /proc."""
        parents: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                parents[int(entry.name)] = int(fields[1])
        tree, frontier = {pid}, {pid}
        while frontier:
            frontier = {child for child, parent in parents.items() if parent in frontier} - tree
            tree |= frontier
        return {p for p in tree if _alive(p)}

    @staticmethod
    def shm_names(pids: Collection[int]) -> set[str]:
        """The /dev/shm names that ``pids`` map now (a name already unlinked is not one), from /proc."""
        names: set[str] = set()
        for pid in pids:
            try:
                maps = Path(f"/proc/{pid}/maps").read_text()
            except OSError:  # gone, or not ours to read
                continue
            for line in maps.splitlines():
                path = line.split(maxsplit=5)[5:]
                if path and path[0].startswith(f"{_SHM}/") and not path[0].endswith(" (deleted)"):
                    names.add(path[0].removeprefix(f"{_SHM}/"))
        return names

    @staticmethod
    def left_in_shm(*, creators: Collection[int], names: Collection[str] = ()) -> list[str]:
        """What of a run is still in /dev/shm: the segments ``creators`` made, and any of ``names``."""
        return sorted({*_segments_of(set(creators)), *(name for name in names if (_SHM / name).exists())})

    @staticmethod
    def check(
        *,
        processes: Collection[int],
        exit_code: int | None,
        expected_exit: int | tuple[int | None, ...] | None,
        fault_at: float | None = None,
        stopped_at: float | None = None,
        bound_s: float = 30.0,
        worker: str | None = None,
        message: str = "",
        creators: Collection[int] = (),
        settle_s: float = 0.0,
        names: Collection[str] = (),
    ) -> float | None:
        """Assert the run is over and clean; returns its time to stop (seconds from the fault).

        Args:
            processes: Pids of the run (parent and workers) that must all be gone.
            exit_code: How the run ended: the parent's exit code (or the code it reported).
            expected_exit: The exit code the fault must give (or a tuple of the codes it may give).
            fault_at: ``time.monotonic()`` when the fault was made (None: no fault, no time check).
            stopped_at: When the parent exited or reported the failure (default: now).
            bound_s: The most seconds from the fault until every process is gone.
            worker: The worker ``message`` must name.
            message: What the run said about the failure (stderr line, exception text).
            creators: Pids whose /dev/shm segments must be gone, besides ``processes``.
            settle_s: Seconds to wait once the processes are gone before looking at /dev/shm.
            names: /dev/shm names of the run (:meth:`shm_names`) that must be gone too.
        """
        start = time.monotonic() if fault_at is None else fault_at
        deadline = start + bound_s
        lingered = False
        while any(_alive(pid) for pid in processes) and time.monotonic() < deadline:
            lingered = True
            time.sleep(0.02)
        gone_at = time.monotonic()
        alive = sorted(pid for pid in processes if _alive(pid))
        assert not alive, f"processes of the run still alive {bound_s} s after the fault: {alive}"
        time.sleep(settle_s)
        left = RunEnd.left_in_shm(creators={*processes, *creators}, names=names)
        assert not left, f"segments of the run left in /dev/shm: {left}"
        allowed = expected_exit if isinstance(expected_exit, tuple) else (expected_exit,)
        assert exit_code in allowed, f"exit code {exit_code}, expected {expected_exit}: {message}"
        if worker is not None:
            assert worker in message, f"the failure does not name {worker}: {message}"
        if fault_at is None:
            return None
        # Processes still alive after the parent stopped count until they are gone.
        took = (gone_at if lingered or stopped_at is None else stopped_at) - fault_at
        _log.info(
            "fault end: exit %s, worker %s, stopped %.3f s after the fault, nothing left",
            exit_code,
            worker,
            took,
        )
        return took


@pytest.fixture
def run_end() -> RunEnd:
    """The end checks of a fault test (``run_end.check(...)``)."""
    return RunEnd()
