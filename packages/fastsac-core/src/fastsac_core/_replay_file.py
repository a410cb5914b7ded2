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
# removes it); the next resume uses the previous file, and its step says how old it is. A write that
# runs out of space removes its temporary file, keeps the previous one and logs one line (the space
# left, the fix); the run goes on.
#
# Writing never stalls the caller for the write itself: ``ReplaySaver`` takes the snapshot (a copy,
# the only part the caller waits for) and hands it to one writer thread, which saves while training
# goes on. A periodic write that comes due while the last one is still being written is skipped
# (the next one comes after another interval). The final write of a run waits for any write in
# flight, then writes in the caller's thread.

# Note [a stop waits for the replay write]
# A stop signal gives the run ``stop_grace_s`` to end cleanly, then stops it at once; a replay write
# cut there loses the buffer of the final checkpoint (Humanoid's 1.35 GB took 4.6 s on the dev
# machine, close to the 5 s default). So a replay write holds the stop: while one is in progress the
# grace period does not run out. A hung write (a dead network disk) must not hold it forever, so each
# write holds for at most ``write_bound_s`` of its buffer: 10 s plus its full storage at 50 MB/s
# (Humanoid: 37 s), several times a normal write. This process's writes are :func:`replay_write_hold`
# (the synchronous trainer's stop asks it); a learner process tells its parent through the engine's
# shared counters, holding from its final checkpoint to its done flag.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ._checkpoint import _write_atomically, read_payload
from ._replay import ReplayBuffer
from ._replay_layout import ReplayLayout
from .exceptions import CheckpointError, ReplayBufferError

__all__ = [
    "ReplayFileInfo",
    "ReplaySaver",
    "load_replay",
    "peek_replay",
    "replay_write_hold",
    "save_replay",
    "write_bound_s",
]

_log = logging.getLogger(__name__)

FORMAT = "fastsac-core/replay/1"

_BOUND_FIXED_S = 10.0
_BOUND_BYTES_PER_S = 50e6
"""The slowest write a stop waits for, in bytes per second (Note [a stop waits for the replay write])."""

_holds: dict[int, float] = {}  # id(saver) -> monotonic deadline of its write in progress
_holds_lock = threading.Lock()


def write_bound_s(buffer: ReplayBuffer) -> float:
    """Longest a stop waits for one replay write of ``buffer`` (Note [a stop waits for the replay write])."""
    nbytes = sum(t.nbytes for t in buffer.storage.values())
    return _BOUND_FIXED_S + nbytes / _BOUND_BYTES_PER_S


@contextlib.contextmanager
def _holding(bound_s: float) -> Iterator[None]:
    """Hold a stop (:func:`replay_write_hold`) while inside, for at most ``bound_s`` from now."""
    token = object()  # one entry per hold: a final write holds while it waits for a periodic one
    with _holds_lock:
        _holds[id(token)] = time.monotonic() + bound_s
    try:
        yield
    finally:
        with _holds_lock:
            del _holds[id(token)]


def replay_write_hold() -> float | None:
    """The ``time.monotonic()`` until which this process's replay writes hold a stop; None: none is running.

    Past that time a write still running no longer holds it (Note [a stop waits for the replay write]).
    """
    with _holds_lock:
        return max(_holds.values(), default=None)


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


def peek_replay(path: str | os.PathLike[str], fits: ReplayLayout | None = None) -> ReplayFileInfo:
    """Step, time, size and extra of a replay file, without reading its data.

    With ``fits``, also checks that a buffer of that layout would restore it, by the rule
    :func:`load_replay` applies (``ReplayLayout.counts``).

    Raises:
        CheckpointError: The file is missing, unreadable, not a replay file, or does not fit ``fits``.
    """
    path = Path(path)
    payload = _read(path)
    if fits is not None:
        _fit(path, lambda: fits.counts(payload["replay"]))
    return _info(path, payload)


def _fit(path: Path, restore: Callable[[], object]) -> None:
    """Run ``restore``; its ``ReplayBufferError`` becomes the one-line ``CheckpointError`` naming ``path``."""
    try:
        restore()
    except ReplayBufferError as exc:
        raise CheckpointError(f"replay file {str(path)!r} does not fit this buffer: {exc}") from exc


def load_replay(path: str | os.PathLike[str], buffer: ReplayBuffer) -> ReplayFileInfo:
    """Restore ``buffer`` from a replay file, whatever device either was on.

    Raises:
        CheckpointError: The file is missing, unreadable, not a replay file, or of another buffer
            (sizes, fields or env blocks; the message says which).
    """
    path = Path(path)
    payload = _read(path)
    _fit(path, lambda: buffer.restore(payload["replay"]))
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
        snapshot, saved_extra, bound_s = buffer.snapshot(), extra(), write_bound_s(buffer)
        self._thread = threading.Thread(
            target=self._write,
            args=(self.path, snapshot, gstep, saved_extra, bound_s),
            name="replay-writer",
            daemon=True,
        )
        self._thread.start()
        return True

    def save_now(
        self, buffer: ReplayBuffer, gstep: int, extra: Callable[[], dict[str, Any]] = dict
    ) -> ReplayFileInfo | None:
        """Wait for a write in flight, then snapshot and write here; the file (None: off, or it failed).

        From the wait to the written file, a stop is held (Note [a stop waits for the replay write]).
        """
        if self.path is None:
            return None
        bound_s = write_bound_s(buffer)
        with _holding(bound_s):
            self.wait()
            self._last = self._clock()
            return self._write(self.path, buffer.snapshot(), gstep, extra(), bound_s)

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for a write in flight (at most ``timeout_s``)."""
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _write(
        self, path: Path, snapshot: dict[str, Any], gstep: int, extra: dict[str, Any], bound_s: float
    ) -> ReplayFileInfo | None:
        started = time.perf_counter()
        try:
            with _holding(bound_s):
                info = save_replay(path, snapshot, gstep=gstep, extra=extra)
        except CheckpointError as error:  # out of space: one line already
            _log.error("replay buffer not saved: %s; the run goes on, the next write tries again", error)
            return None
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
