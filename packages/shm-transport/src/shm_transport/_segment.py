"""Named shared-memory segments in /dev/shm, mapped by torch, with a small fixed header.

# Note [Segment lifecycle]

A segment is a file ``/dev/shm/shmtx-<creator pid>-<random hex>`` (the prefix is ``$SHMTX_PREFIX`` where
that is set) that the *parent* creates with
``O_CREAT | O_EXCL`` and maps with ``torch.from_file(shared=True)`` (``MAP_SHARED``); other processes
attach by name. We do not use ``multiprocessing.shared_memory``: its resource tracker unlinks a
segment when *any* attaching process exits on Python 3.11/3.12 (cpython#82300), and ``track=False``
only exists from 3.13. Nothing here registers with the resource tracker, so the rules are ours:

* ``close()`` in every process drops this object's mapping; the pages stay mapped while any tensor
  view (for instance one returned by ``read_span``) is alive, and are unmapped with the last one;
* ``unlink()`` exactly once, by the creator, removes the name; processes that still map the segment
  keep working, and the memory is freed when the last mapping goes;
* a child that is SIGKILLed leaves nothing behind (it only maps); a creator that is SIGKILLed leaves
  its names behind, and ``cleanup_stale_segments()`` (or ``shm-transport cleanup``) removes every
  name whose creator pid is dead: call it when the parent starts.

# Note [Segment header layout]

The first ``HEADER_NBYTES`` (384) bytes of every segment are int64 words, little-endian:

====== ======================================================================
offset meaning
====== ======================================================================
0      magic ``MAGIC`` ("SHMTX1")
8      header format version ``HEADER_VERSION``
16     kind: 1 host ring, 2 ring cursors, 3 weight channel
24     capacity (rings) or number of parameters (weight channel)
32     layout fingerprint (``RingLayout.fingerprint`` or the weight-channel equivalent)
40     total segment bytes
48     creator pid
56     debug flag (0/1)
64     attached producer pid, 0 if none (``RingCursors`` only; see Note [CUDA-IPC teardown order])
128    counter A: the ring's write cursor, or the weight channel's sequence number
256    counter B: the ring's read cursor (unused by the weight channel)
====== ======================================================================

Counters A and B sit 128 bytes apart, on different cache lines and outside the adjacent-line
prefetch pair, so the producer's and the consumer's stores do not false-share.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
from pathlib import Path

import torch

from shm_transport.exceptions import SegmentError

__all__ = [
    "COUNTER_A",
    "COUNTER_B",
    "HEADER_NBYTES",
    "HEADER_VERSION",
    "KIND_CURSORS",
    "KIND_RING",
    "KIND_WEIGHTS",
    "MAGIC",
    "PREFIX_ENV",
    "PRODUCER_PID",
    "SEGMENT_PREFIX",
    "SHM_DIR",
    "Segment",
    "default_prefix",
    "parse_creator_pid",
]

_log = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")
SEGMENT_PREFIX = "shmtx-"
"""Default prefix of every segment name."""
PREFIX_ENV = "SHMTX_PREFIX"
"""Environment variable that replaces :data:`SEGMENT_PREFIX` for this process and its children.

Processes that share one ``/dev/shm`` but not one pid namespace (containers), or a test run
beside a live run, each set their own: creation, listing and the stale-segment sweep then see only
names with their prefix, so no one removes another's segments."""
_PREFIX_RE = re.compile(r"^[A-Za-z0-9._-]*[A-Za-z._-]$")  # not empty, not ending in a digit: the pid follows


def check_prefix(prefix: str, setting: str) -> str:
    """``prefix`` if it is a usable segment name prefix, given as ``setting`` (for the error).

    Raises:
        SegmentError: ``prefix`` is empty, holds characters other than letters, digits, ``.``, ``_``,
            ``-``, or ends in a digit (the creator's pid follows it).
    """
    if not _PREFIX_RE.match(prefix):
        raise SegmentError(
            f"{setting}={prefix!r} is not a usable segment name prefix; use letters, digits, '.', '_' "
            f"and '-' only, not ending in a digit (e.g. {setting}=shmtx-job42-)"
        )
    return prefix


def default_prefix() -> str:
    """The segment name prefix in force: ``$SHMTX_PREFIX`` if set, else :data:`SEGMENT_PREFIX`.

    Raises:
        SegmentError: ``SHMTX_PREFIX`` is not a usable prefix (``check_prefix``); unset it for the default.
    """
    prefix = os.environ.get(PREFIX_ENV, "")
    if not prefix:
        return SEGMENT_PREFIX
    try:
        return check_prefix(prefix, PREFIX_ENV)
    except SegmentError as error:
        raise SegmentError(f"{error}, or unset it") from None


_NAME_TAIL_RE = re.compile(r"^(?P<pid>\d+)-(?P<token>[0-9a-f]+)$")

MAGIC = int.from_bytes(b"SHMTX1\x00\x00", "little")
HEADER_VERSION = 1
HEADER_NBYTES = 384
KIND_RING = 1
KIND_CURSORS = 2
KIND_WEIGHTS = 3
_KIND_NAMES = {KIND_RING: "host ring", KIND_CURSORS: "ring cursors", KIND_WEIGHTS: "weight channel"}

# Word indices into the header viewed as int64 (see Note [Segment header layout]).
_W_MAGIC, _W_VERSION, _W_KIND, _W_CAPACITY, _W_FINGERPRINT, _W_NBYTES, _W_PID, _W_DEBUG = range(8)
PRODUCER_PID = 64 // 8
COUNTER_A = 128 // 8
COUNTER_B = 256 // 8


def parse_creator_pid(name: str, prefix: str | None = None) -> int | None:
    """The creator pid encoded in a segment name, or None if the name does not carry ``prefix``.

    ``prefix`` defaults to :func:`default_prefix`.
    """
    prefix = default_prefix() if prefix is None else prefix
    if not name.startswith(prefix):
        return None
    match = _NAME_TAIL_RE.match(name[len(prefix) :])
    return None if match is None else int(match.group("pid"))


class Segment:
    """One mapped /dev/shm segment: a uint8 tensor over the whole file plus int64 header words.

    ``words`` is a memoryview of the header as int64: indexing it is one aligned 8-byte load or
    store (see Note [Ring memory ordering] in ``_host_ring``).
    """

    def __init__(self, name: str, data: torch.Tensor, *, creator: bool) -> None:
        self.name = name
        self.creator = creator
        self._data: torch.Tensor | None = data
        header = data[:HEADER_NBYTES].numpy()
        self._words: memoryview | None = header.data.cast("B").cast("q")

    @property
    def path(self) -> Path:
        """The segment's file in /dev/shm."""
        return SHM_DIR / self.name

    @property
    def data(self) -> torch.Tensor:
        """The whole segment as a uint8 tensor (header included)."""
        if self._data is None:
            raise SegmentError(f"segment {self.name!r} is closed in this process; attach it again to use it")
        return self._data

    @property
    def words(self) -> memoryview:
        """The header as int64 words (see Note [Segment header layout])."""
        if self._words is None:
            raise SegmentError(f"segment {self.name!r} is closed in this process; attach it again to use it")
        return self._words

    @classmethod
    def create(
        cls,
        nbytes: int,
        *,
        kind: int,
        capacity: int,
        fingerprint: int,
        debug: bool,
        prefix: str | None = None,
    ) -> Segment:
        """Create, size and map a new segment, and write its header (the caller is the creator).

        Its name is ``<prefix><pid>-<random hex>``, ``prefix`` defaulting to :func:`default_prefix`.
        """
        prefix = default_prefix() if prefix is None else prefix
        if not SHM_DIR.is_dir():
            raise SegmentError(f"{SHM_DIR} does not exist; shm-transport needs a Linux tmpfs at {SHM_DIR}")
        free = _free_shm_bytes()
        if nbytes > free:
            raise SegmentError(
                f"a {_KIND_NAMES[kind]} of {nbytes} bytes does not fit in {SHM_DIR} ({free} bytes free); "
                "lower the capacity/envs, or enlarge /dev/shm (e.g. docker run --shm-size=16g)"
            )
        name = f"{prefix}{os.getpid()}-{secrets.token_hex(6)}"
        path = SHM_DIR / name
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, nbytes)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        os.close(fd)
        try:
            data = torch.from_file(str(path), shared=True, size=nbytes, dtype=torch.uint8)
            segment = cls(name, data, creator=True)
            words = segment.words
            words[_W_VERSION] = HEADER_VERSION
            words[_W_KIND] = kind
            words[_W_CAPACITY] = capacity
            words[_W_FINGERPRINT] = fingerprint
            words[_W_NBYTES] = nbytes
            words[_W_PID] = os.getpid()
            words[_W_DEBUG] = int(debug)
            words[COUNTER_A] = 0
            words[COUNTER_B] = 0
            words[_W_MAGIC] = MAGIC  # last: a header with a magic is complete
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        _log.debug("created %s segment %s (%d bytes)", _KIND_NAMES[kind], name, nbytes)
        return segment

    @classmethod
    def attach(cls, name: str, *, kind: int, capacity: int, fingerprint: int) -> Segment:
        """Map an existing segment by name and check that its header matches what the caller expects."""
        path = SHM_DIR / name
        try:
            nbytes = path.stat().st_size
        except FileNotFoundError:
            raise SegmentError(
                f"segment {name!r} does not exist in {SHM_DIR}: its creator already unlinked it or died; "
                "attach only while the creating (parent) process keeps it alive"
            ) from None
        if nbytes < HEADER_NBYTES:
            raise SegmentError(f"segment {name!r} is {nbytes} bytes, shorter than a header ({HEADER_NBYTES})")
        segment = cls(
            name, torch.from_file(str(path), shared=True, size=nbytes, dtype=torch.uint8), creator=False
        )
        words = segment.words
        expected = {
            "magic": (words[_W_MAGIC], MAGIC),
            "header version": (words[_W_VERSION], HEADER_VERSION),
            "kind": (words[_W_KIND], kind),
            "capacity": (words[_W_CAPACITY], capacity),
            "layout fingerprint": (words[_W_FINGERPRINT], fingerprint),
            "size": (words[_W_NBYTES], nbytes),
        }
        for what, (seen, wanted) in expected.items():
            if seen != wanted:
                segment.close()
                raise SegmentError(
                    f"segment {name!r} has {what}={seen}, expected {wanted}: the handle does not describe "
                    "this segment; attach with the handle its creator produced"
                )
        return segment

    @property
    def debug(self) -> bool:
        """The creator's debug flag."""
        return bool(self.words[_W_DEBUG])

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called in this process."""
        return self._data is None

    def close(self) -> None:
        """Drop this process's mapping (idempotent); live tensor views keep the pages mapped."""
        if self._words is not None:
            self._words.release()
        self._words = None
        self._data = None

    def unlink(self) -> None:
        """Remove the name from /dev/shm (creator only, idempotent)."""
        if not self.creator:
            raise SegmentError(
                f"segment {self.name!r} was attached, not created, in pid {os.getpid()}; only its creator "
                "unlinks it (call unlink() in the parent that called create())"
            )
        try:
            os.unlink(SHM_DIR / self.name)
        except FileNotFoundError:
            _log.debug("segment %s was already unlinked", self.name)
        else:
            _log.debug("unlinked segment %s", self.name)


def _free_shm_bytes() -> int:
    stats = os.statvfs(SHM_DIR)
    return stats.f_bavail * stats.f_frsize
