"""Ctrl+C handling of the parent: the first press asks for a clean stop, the second aborts."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["StopRequest"]


class StopRequest:
    """A ``should_stop`` callable driven by SIGINT.

    The first Ctrl+C sets the flag (the trainer finishes its step, writes a final checkpoint and
    returns) and calls ``on_first``; the second raises :class:`KeyboardInterrupt` to abort.
    Use as a context manager: the previous SIGINT handler is restored on exit.

    Args:
        on_first: Called once, from the signal handler, when the first stop is requested.
    """

    def __init__(self, on_first: Callable[[], None] | None = None) -> None:
        self._event = threading.Event()
        self._on_first = on_first
        self._presses = 0
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
        self._presses += 1
        if self._presses >= 2:
            raise KeyboardInterrupt
        self.request()

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
