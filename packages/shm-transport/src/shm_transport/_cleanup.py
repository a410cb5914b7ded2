"""Finding and removing segments whose creator died (see Note [Segment lifecycle] in ``_segment``)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from shm_transport._segment import SHM_DIR, check_prefix, default_prefix, parse_creator_pid

__all__ = ["SegmentInfo", "cleanup_stale_segments", "list_segments", "pid_alive"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SegmentInfo:
    """One shm-transport segment found in /dev/shm."""

    name: str
    """Segment name."""
    creator_pid: int
    """Pid parsed from the name."""
    nbytes: int
    """File size in bytes."""
    creator_alive: bool
    """Whether a live (non-zombie) process has that pid."""


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` names a live process (zombies count as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def list_segments(*, prefix: str | None = None) -> list[SegmentInfo]:
    """Every segment in /dev/shm whose name carries ``prefix`` and a creator pid, sorted by name.

    ``prefix`` defaults to :func:`~shm_transport._segment.default_prefix` (``$SHMTX_PREFIX`` or ``shmtx-``).
    """
    prefix = default_prefix() if prefix is None else check_prefix(prefix, "prefix")
    found: list[SegmentInfo] = []
    try:
        entries = sorted(SHM_DIR.iterdir())
    except FileNotFoundError:
        return found
    for path in entries:
        pid = parse_creator_pid(path.name, prefix)
        if pid is None:
            continue
        try:
            nbytes = path.stat().st_size
        except FileNotFoundError:
            continue
        found.append(SegmentInfo(path.name, pid, nbytes, pid_alive(pid)))
    return found


def cleanup_stale_segments(*, prefix: str | None = None, dry_run: bool = False) -> list[str]:
    """Remove every segment whose creator pid is dead; returns the names removed (or that would be).

    Call it when a parent starts (``sweep on start``): a parent that was SIGKILLed could not unlink
    its segments. Live creators' segments are never touched. Caveat: a dead creator's pid reused by
    another process hides its segments until that process exits; PID namespaces that share one
    /dev/shm (containers) must use distinct prefixes (``SHMTX_PREFIX``).

    Args:
        prefix: the name prefix to consider (default: ``$SHMTX_PREFIX``, else ``shmtx-``).
        dry_run: only report, remove nothing.
    """
    removed: list[str] = []
    for info in list_segments(prefix=prefix):
        if info.creator_alive:
            continue
        if not dry_run:
            try:
                (SHM_DIR / info.name).unlink()
            except FileNotFoundError:
                continue
            _log.info("removed stale segment %s (creator pid %d is dead)", info.name, info.creator_pid)
        removed.append(info.name)
    return removed
