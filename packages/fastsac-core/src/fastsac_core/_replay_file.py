"""The replay file: a rank's replay buffer on disk, written beside the training and read at a resume.

# Note [replay file]
# One file per learner rank, replaced as a whole at each write. It holds ``ReplayBuffer.snapshot()``
# (counts, the written rows of each env block in their stored dtype: float32 fields, bool flags;
# every env's running return) and the step it was taken at, the wall-clock time, and the caller's
# ``extra`` (the synchronous trainer puts its envs' state there). Only the filled part is stored, so a
# buffer that is a tenth full writes a tenth of its capacity. Float16 would halve the observations
# but a resume from it would no longer be exact: the file keeps what the buffer holds.
#
# Written atomically, as a checkpoint is (``_checkpoint._write_atomically``): into a hidden temporary
# file beside it, fsynced, renamed over the old one. A process killed during a write leaves the
# previous complete file and a ``.<name>.<random>.tmp`` that nothing reads (``discard_partial_checkpoints``
# removes it); the next resume uses the previous file, and its step says how old it is.
#
# Writing never stalls the caller for the write itself: ``ReplaySaver`` takes the snapshot (a copy,
# the only part the caller waits for) and hands it to one writer thread, which saves while training
# goes on. A periodic write that comes due while the last one is still being written is skipped
# (the next one comes after another interval). The final write of a run waits for any write in
# flight, then writes in the caller's thread.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._checkpoint import _write_atomically, read_payload
from ._replay import ReplayBuffer
from .exceptions import CheckpointError, ReplayBufferError

__all__ = ["ReplayFileInfo", "ReplaySaver", "load_replay", "peek_replay", "save_replay"]

_log = logging.getLogger(__name__)

FORMAT = "fastsac-core/replay/1"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReplayFileInfo:
    """What a replay file holds, without its data."""

    path: Path
    """The file."""
    gstep: int
    """The step (iteration) its snapshot was taken at."""
    written_at: float
    """When it was written (``time.time()``)."""
    transitions: int
    """Transitions stored, over every env."""
    nbytes: int
    """Bytes of its tensors (the file is a few kB larger)."""
    extra: dict[str, Any]
    """The caller's data saved with it."""


def save_replay(
    path: str | os.PathLike[str], snapshot: dict[str, Any], *, gstep: int, extra: dict[str, Any] | None = None
) -> ReplayFileInfo:
    """Write ``snapshot`` (``ReplayBuffer.snapshot()``) to ``path`` atomically (Note [replay file])."""
    payload = {
        "format": FORMAT,
        "gstep": int(gstep),
        "written_at": time.time(),
        "replay": snapshot,
        "extra": extra or {},
    }
    written = _write_atomically(Path(path), payload)
    return _info(written, payload)


def _info(path: Path, payload: dict[str, Any]) -> ReplayFileInfo:
    replay = payload["replay"]
    rows = [min(int(w), int(replay["capacity"])) for w in replay["block_written"]]
    blocks = [int(b) for b in replay["blocks"]]
    nbytes = sum(t.nbytes for field in replay["data"].values() for t in field)
    return ReplayFileInfo(
        path=path,
        gstep=int(payload["gstep"]),
        written_at=float(payload["written_at"]),
        transitions=sum(r * b for r, b in zip(rows, blocks, strict=True)),
        nbytes=nbytes,
        extra=payload["extra"],
    )


def _read(path: Path) -> dict[str, Any]:
    # mmap: a restore copies each block straight from the page cache, never a whole second copy.
    return read_payload(
        path, "replay file", FORMAT, map_location="cpu", mmap=True, missing="",
        unreadable="; delete it to resume with an empty replay buffer",
    )  # fmt: skip


def peek_replay(path: str | os.PathLike[str]) -> ReplayFileInfo:
    """Step, time, size and extra of a replay file, without reading its data.

    Raises:
        CheckpointError: The file is missing, unreadable or not a replay file.
    """
    path = Path(path)
    return _info(path, _read(path))


def load_replay(path: str | os.PathLike[str], buffer: ReplayBuffer) -> ReplayFileInfo:
    """Restore ``buffer`` from a replay file, whatever device either was on.

    Raises:
        CheckpointError: The file is missing, unreadable, not a replay file, or of another buffer
            (sizes, fields or env blocks; the message says which).
    """
    path = Path(path)
    payload = _read(path)
    try:
        buffer.restore(payload["replay"])
    except ReplayBufferError as exc:
        raise CheckpointError(f"replay file {str(path)!r} does not fit this buffer: {exc}") from exc
    return _info(path, payload)


class ReplaySaver:
    """Writes a buffer's snapshots to one file: every ``interval_s`` seconds from a thread, and at the end.

    See Note [replay file].

    Args:
        path: The file (``RunLayout.replay``); None saves nothing (``save_replay=false``).
        interval_s: Seconds between two periodic writes, counted from construction; None: only
            :meth:`save_now`.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        path: Path | None,
        interval_s: float | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.interval_s = interval_s
        self._clock = clock
        self._last = clock()
        self._thread: threading.Thread | None = None
        self.last_written: ReplayFileInfo | None = None
        """The last file completed (by either path)."""
        self.last_write_s: float | None = None
        """Seconds the last completed write took (snapshot excluded)."""

    @property
    def writing(self) -> bool:
        """A periodic write is in flight."""
        return self._thread is not None and self._thread.is_alive()

    def due(self) -> bool:
        """A periodic write is due (and none is in flight)."""
        if self.path is None or self.interval_s is None or self.writing:
            return False
        return self._clock() - self._last >= self.interval_s

    def maybe_save(
        self, buffer: ReplayBuffer, gstep: int, extra: Callable[[], dict[str, Any]] = dict
    ) -> bool:
        """If due, snapshot ``buffer`` (and ``extra()``) now and write it from a thread; True if started.

        The caller must have landed its pending writes into ``buffer`` (a CUDA learner waits for its
        copy stream first).
        """
        if not self.due():
            return False
        assert self.path is not None
        self._last = self._clock()
        snapshot, saved_extra = buffer.snapshot(), extra()
        self._thread = threading.Thread(
            target=self._write,
            args=(self.path, snapshot, gstep, saved_extra),
            name="replay-writer",
            daemon=True,
        )
        self._thread.start()
        return True

    def save_now(
        self, buffer: ReplayBuffer, gstep: int, extra: Callable[[], dict[str, Any]] = dict
    ) -> ReplayFileInfo | None:
        """Wait for a write in flight, then snapshot and write here; the file (None: off, or it failed)."""
        if self.path is None:
            return None
        self.wait()
        self._last = self._clock()
        return self._write(self.path, buffer.snapshot(), gstep, extra())

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for a write in flight (at most ``timeout_s``)."""
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _write(
        self, path: Path, snapshot: dict[str, Any], gstep: int, extra: dict[str, Any]
    ) -> ReplayFileInfo | None:
        started = time.perf_counter()
        try:
            info = save_replay(path, snapshot, gstep=gstep, extra=extra)
        except Exception:
            # The run goes on: the previous file (if any) stays complete; the next write tries again.
            _log.exception("replay buffer write to %s failed; the previous replay file is kept", path)
            return None
        self.last_write_s = time.perf_counter() - started
        self.last_written = info
        _log.info(
            "replay buffer of %d transitions (%.1f MB) at step %d written to %s in %.2f s",
            info.transitions, info.nbytes / 1e6, gstep, path, self.last_write_s,
        )  # fmt: skip
        return info
