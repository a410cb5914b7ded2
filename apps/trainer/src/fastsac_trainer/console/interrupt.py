"""Stop signals of the parent: the first asks for a clean stop, a second one stops at once.

Ctrl+C (SIGINT), SIGTERM (``kill``, ``docker stop``, SLURM, systemd, Kubernetes) and SIGHUP (a closed
terminal) all mean "stop": the trainer finishes its step, the learners write a final checkpoint and
the CLI exits 0. Job managers kill the job a few seconds later (``docker stop``: 10 s), so the clean
stop gets ``grace_s``; after that, as on a second signal, the run stops at once. Time in which a replay
write holds the stop (``hold``) does not count (Note [a stop waits for the replay write] in
``fastsac_core._replay_file``); a second signal is never held (:attr:`StopRequest.forced`).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

__all__ = ["STOP_SIGNALS", "StopRequest"]

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals that always stop a run (a checkpoint signal, such as SIGUSR1, may be added)."""

_HOLD_POLL_S = 0.05
"""How often the grace clock asks ``hold`` while it runs."""

_REQUESTED = "stop_requested"
"""The reason of a stop asked for by :meth:`StopRequest.request` rather than by a signal."""


class StopRequest:
    """A ``should_stop`` callable driven by the stop signals.

    The first signal sets the flag (the trainer finishes its step, writes a final checkpoint and
    returns) and calls ``on_first`` with its name. A second signal, or ``grace_s`` passing before the
    context is left, aborts: :attr:`aborted` turns true and, with ``raise_on_abort``,
    :class:`KeyboardInterrupt` is raised in the main thread (the synchronous trainer: one process,
    nothing else to stop). Without it the caller polls :attr:`aborted` (the asynchronous engine,
    whose shutdown must not be cut in the middle) and :attr:`forced`: the engine holds the grace
    period's abort while a learner writes its replay, never a second signal's. Use as a context
    manager: the previous handlers are restored on exit.

    A signal within ``debounce_s`` of the first counts as the same one: ``uv run`` forwards the
    terminal's SIGINT (or a SIGTERM sent to the whole job) to its child, which then sees it twice.

    Args:
        on_first: Called once, from the signal handler, with the first signal's name (``SIGTERM``).
        signals: The signals handled.
        grace_s: Longest time from the first signal to leaving the context; None: no limit.
        debounce_s: Window after the first signal in which another one is the same signal.
        raise_on_abort: Raise :class:`KeyboardInterrupt` in the main thread on abort.
        hold: ``time.monotonic()`` until which a replay write holds the stop, or None
            (``fastsac_core.replay_write_hold``): the grace clock stops while it is in the future.
    """

    def __init__(
        self,
        on_first: Callable[[str], None] | None = None,
        *,
        signals: Sequence[signal.Signals] = STOP_SIGNALS,
        grace_s: float | None = None,
        debounce_s: float = 1.0,
        raise_on_abort: bool = True,
        hold: Callable[[], float | None] | None = None,
    ) -> None:
        self._event = threading.Event()
        self._on_first = on_first
        self._signals = tuple(dict.fromkeys(signals))
        self._grace_s = grace_s
        self._debounce_s = debounce_s
        self._raise_on_abort = raise_on_abort
        self._first: tuple[signal.Signals, float] | None = None
        self._reason: str | None = None
        self._abort: tuple[int, str] | None = None
        self._forced = False
        self._raised = False
        self._hold = hold
        self._held_s = 0.0
        self._timer: threading.Thread | None = None
        self._timer_cancel = threading.Event()
        self._lock = threading.Lock()  # the timer never signals a main thread that left the context
        self._exited = False
        self._previous: dict[signal.Signals, Any] = {}

    def __call__(self) -> bool:
        """Whether a stop was requested."""
        return self._event.is_set()

    @property
    def reason(self) -> str | None:
        """Name of the signal that asked for the stop (``SIGTERM``), ``stop_requested``, or None."""
        return self._reason

    @property
    def aborted(self) -> bool:
        """Whether the run must stop at once (a second signal, or the grace period ran out)."""
        return self._abort is not None

    @property
    def forced(self) -> bool:
        """Whether a second signal aborted (never held by a replay write), not the grace period."""
        return self._forced

    @property
    def abort_cause(self) -> str | None:
        """Why it aborted (``second SIGTERM``), or None."""
        return None if self._abort is None else self._abort[1]

    @property
    def abort_signal(self) -> int | None:
        """The signal number behind the abort (the first signal's when the grace period ran out)."""
        return None if self._abort is None else self._abort[0]

    def request(self, reason: str = _REQUESTED) -> None:
        """Ask for a clean stop (what the first signal does)."""
        if not self._event.is_set():
            self._reason = reason
            self._event.set()
            if self._on_first is not None:
                self._on_first(reason)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        sig = signal.Signals(signum)
        if self._first is None:
            self._first = (sig, now)
            self._start_grace()
            self.request(sig.name)
        elif not self._forced and now - self._first[1] > self._debounce_s:
            self._forced = True  # also after the grace period ran out: the engine may hold that abort
            if not self._raised:  # the grace period's abort has not taken effect: this signal's does
                self._abort = (signum, f"second {sig.name}")
        if self._abort is not None and self._raise_on_abort and not self._raised:
            self._raised = True
            raise KeyboardInterrupt

    def _start_grace(self) -> None:
        if self._grace_s is None:
            return
        self._timer = threading.Thread(target=self._run_grace, name="stop-grace", daemon=True)
        self._timer.start()

    def _run_grace(self) -> None:
        """Timer thread: ``grace_s`` of time in which no replay write holds the stop, then abort."""
        assert self._grace_s is not None
        left, last = self._grace_s, time.monotonic()
        while not self._timer_cancel.wait(left if self._hold is None else min(left, _HOLD_POLL_S)):
            now = time.monotonic()
            until = None if self._hold is None else self._hold()
            if until is not None and until > now:
                self._held_s += now - last
            else:
                left -= now - last
            last = now
            if left <= 0:
                break
        else:
            return
        self._grace_over()

    def _grace_over(self) -> None:
        """Timer thread: the clean stop took longer than ``grace_s``."""
        with self._lock:
            if self._exited or self._first is None or self._abort is not None:
                return
            first = self._first[0]
            held = f" (and {self._held_s:.1f} s of replay writes)" if self._held_s else ""
            self._abort = (first, f"the stop after {first.name} took longer than {self._grace_s:g} s{held}")
            if self._raise_on_abort:
                # A real signal, not _thread.interrupt_main: it also ends a blocking system call.
                signal.pthread_kill(threading.main_thread().ident or 0, first)

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in self._signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            with self._lock:
                self._exited = True
            if self._timer is not None:
                self._timer_cancel.set()
                self._timer.join(1.0)
                self._timer = None
        finally:
            for sig, previous in self._previous.items():
                signal.signal(sig, signal.SIG_DFL if previous is None else previous)
            self._previous.clear()
