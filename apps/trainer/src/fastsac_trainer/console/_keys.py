"""Single-key input for the tabs: cbreak, no echo, on stdin only when it is a TTY; always restored."""

from __future__ import annotations

import contextlib
import os
import select
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["KeyReader"]


class KeyReader:
    """Reads single keys from a TTY stdin in a daemon thread and hands each to ``on_key``.

    The terminal is put in cbreak mode without echo (Ctrl+C still raises SIGINT) and restored by
    :meth:`stop`, which is idempotent. Without a TTY on stdin (pipes, CI, tests) it does nothing.

    Args:
        on_key: Called with each key read (from the reader thread).
    """

    def __init__(self, on_key: Callable[[str], None]) -> None:
        self._on_key = on_key
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._saved: Any = None
        self._fd = -1

    def start(self) -> bool:
        """Start reading if stdin is a TTY; returns whether it did."""
        try:
            fd = sys.stdin.fileno()
        except (AttributeError, OSError, ValueError):
            return False
        if not os.isatty(fd):
            return False
        import termios

        self._fd = fd
        self._saved = termios.tcgetattr(fd)
        attrs = termios.tcgetattr(fd)
        attrs[3] &= ~(termios.ICANON | termios.ECHO)  # lflags: cbreak without echo, ISIG kept.
        attrs[6][termios.VMIN] = 1
        attrs[6][termios.VTIME] = 0
        termios.tcsetattr(fd, termios.TCSADRAIN, attrs)
        self._thread = threading.Thread(target=self._loop, name="console-keys", daemon=True)
        self._thread.start()
        return True

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._fd], [], [], 0.1)
                if ready:
                    data = os.read(self._fd, 1)
                    if not data:  # end of input (a hung-up terminal): stop, or select spins
                        return
                    key = data.decode(errors="ignore")
                    if key:
                        self._on_key(key)
            except (OSError, ValueError):
                return

    def stop(self) -> None:
        """Stop the reader and restore the terminal settings (safe to call more than once)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None
        if self._saved is not None:
            import termios

            with contextlib.suppress(OSError, termios.error):
                termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)
            self._saved = None
