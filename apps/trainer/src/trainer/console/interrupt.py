"""Ctrl+C handling of the parent: the first press asks for a clean stop, the second aborts."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["StopRequest"]


class StopRequest:
    """A ``should_stop`` callable driven by SIGINT.

    The first Ctrl+C sets the flag (the trainer finishes its step, writes a final checkpoint and
    returns) and calls ``on_first``; the second raises :class:`KeyboardInterrupt` to abort.
    Use as a context manager: the previous SIGINT handler is restored on exit.

    A SIGINT within ``debounce_s`` of the first counts as the same press: ``uv run`` forwards the
    terminal's SIGINT to its child, which then sees one Ctrl+C twice.

    Args:
        on_first: Called once, from the signal handler, when the first stop is requested.
        debounce_s: Window after the first press in which another SIGINT is the same press.
    """

    def __init__(self, on_first: Callable[[], None] | None = None, *, debounce_s: float = 1.0) -> None:
        self._event = threading.Event()
        self._on_first = on_first
        self._debounce_s = debounce_s
        self._first_press: float | None = None
        self._previous: Any = None

    def __call__(self) -> bool:
        """Whether a stop was requested."""
        return self._event.is_set()

    def request(self) -> None:
        """Ask for a clean stop (what the first Ctrl+C does)."""
        if not self._event.is_set():
            self._event.set()
            if self._on_first is not None:
                self._on_first()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self._first_press is None:
            self._first_press = now
            self.request()
        elif now - self._first_press > self._debounce_s:
            raise KeyboardInterrupt

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
