"""Console output that outlives its reader: a closed pipe (``trainer | head``) or a hung-up terminal.

Writing to a pipe whose reader exited raises ``BrokenPipeError``, and to a terminal that was
closed ``OSError(EIO)``; raised in the middle of a run, either would take the parent down. A
:class:`GuardedStream` turns the first such error into "this stream is gone": it drops every later
write, points the file descriptor at ``/dev/null`` (so what is still buffered, and Python's flush at
exit, go nowhere instead of failing again), and reports it once, so the run goes on and its log
file keeps everything.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["GuardedStream"]


class GuardedStream(io.TextIOBase):
    """A text stream that stops writing, without raising, once its reader has gone away.

    Args:
        stream: The stream written to (``sys.stdout``).
        name: Its name in the report (``stdout``).
        on_lost: Called once with a one-line description when the stream is found gone.
    """

    def __init__(self, stream: TextIO, name: str, on_lost: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self._stream = stream
        self._name = name
        self._on_lost = on_lost
        self.lost = False
        """True once a write or flush failed: everything written since was dropped."""

    @property
    def wrapped(self) -> TextIO:
        """The stream written to."""
        return self._stream

    @property
    def buffer(self) -> Any:
        """The wrapped stream's binary buffer (for code that writes bytes; not guarded)."""
        return getattr(self._stream, "buffer", None)

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """Encoding of the wrapped stream."""
        return getattr(self._stream, "encoding", None) or "utf-8"

    def writable(self) -> bool:
        """Always (writes after a loss are dropped)."""
        return True

    def isatty(self) -> bool:
        """Whether the wrapped stream is a terminal (False once it is lost)."""
        if self.lost:
            return False
        try:
            return self._stream.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        """File descriptor of the wrapped stream."""
        return self._stream.fileno()

    def write(self, text: str) -> int:
        """Write ``text``; once the stream is lost, drop it."""
        if not self.lost:
            try:
                self._stream.write(text)
            except (OSError, ValueError) as error:  # ValueError: the stream was closed
                self._lose(error)
        return len(text)

    def flush(self) -> None:
        """Flush the wrapped stream, unless it is lost."""
        if not self.lost:
            try:
                self._stream.flush()
            except (OSError, ValueError) as error:
                self._lose(error)

    def _lose(self, error: Exception) -> None:
        self.lost = True
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)
        if self._on_lost is not None:
            self._on_lost(f"{self._name} was closed ({type(error).__name__}: {error})")
