"""Heartbeats between the hosts' parents: a host that dies is named, and the others stop.

# Note [host heartbeats]
Every host's parent sets ``beat/<host>`` to a growing counter every ``interval_s`` and reads every
other host's. A counter that has not moved for ``lost_after_s`` (judged on this host's own clock, so
no clocks need to agree) means that host is lost: SIGKILLed, powered off or cut off. The run's
store itself unreachable for as long, or refusing connections (host 0's machine answers, but
nothing listens at the store's address any more), means the host that serves it (host 0) is lost;
once host 0 has said it is done, its store going away is its end, not a loss. A store client whose
connection broke fails every call after, each failure printing torch's warning with a stack trace,
so from the first failure on the watch only knocks at the store's address (a plain TCP connect,
which prints nothing) and opens a new client once something answers there. A host that failed
knocks before it says so: usually its learners saw host 0 go first (their collective broke), and a
refused knock then gives the watch its verdict at once, with no store call at all; a knock that
gets no answer in time (one lost SYN: Linux resends it after 1 s) is no verdict, so the failure is
still said to the store, within its client's timeout. A host that ends sets ``left/<host>``:
``done``, or the line it failed with, numbered by one shared counter (``failures``) so the first
failure of the run is the one named; a host that failed never says ``done``, even where its line
could not be said (the others then name it as lost, never as done). A lost host is usually noticed
first by the learners (their collective fails, or waits until torch.distributed's timeout); the
parent then waits up to ``lost_after_s`` for the verdict of :meth:`HostWatch.verdict`, so the line
it ends with names the host, not only the collective that broke.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["HostLostError", "HostWatch"]

_log = logging.getLogger(__name__)


class HostLostError(Exception):
    """Another host of the run was lost or failed; this host stopped (the message names it)."""

    def line(self) -> str:
        """The one line the run ends with (like a failed worker's)."""
        return str(self)


class HostWatch:
    """This host's heartbeat, and its watch over the other hosts' (Note [host heartbeats]).

    Args:
        connect: Opens a client of the run's store (one for the watch thread, one for the caller).
        host: This host's rank.
        num_hosts: Hosts of the run.
        store: Host and port of the run's store (knocked at once a client failed; named in the messages).
        interval_s: Seconds between beats.
        lost_after_s: A heartbeat still for this long means its host is lost.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        *,
        host: int,
        num_hosts: int,
        store: tuple[str, int],
        interval_s: float = 1.0,
        lost_after_s: float = 10.0,
    ) -> None:
        self._connect = connect
        self._store = connect()
        self._host, self._num_hosts, self._store_at = host, num_hosts, store
        self._address = f"{store[0]}:{store[1]}"
        self._interval_s, self.lost_after_s = interval_s, lost_after_s
        self._lost: str | None = None
        self._store_gone = False  # host 0's store is gone: nothing more is said to it
        self._failed = False  # this host failed: it never says done (Note [host heartbeats])
        self._done: set[int] = set()  # hosts that left done
        self._first_failure: tuple[int, str] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="host-heartbeat", daemon=True)

    @property
    def lost(self) -> str | None:
        """Why another host is gone (``host 1 (name) lost: ...``), or None while every host beats."""
        return self._lost

    def start(self) -> None:
        """Beat once now (every host sees a first beat before the others watch it), then watch."""
        self._store.set(f"beat/{self._host}", "0")
        self._thread.start()

    def _knock(self) -> bool | None:
        """Whether something listens at the store's address: True, False (refused), None (no answer soon)."""
        try:
            with socket.create_connection(self._store_at, timeout=self._interval_s):
                return True
        except ConnectionRefusedError:
            return False
        except OSError:
            return None

    def _run(self) -> None:
        store = self._connect()
        beats = 0
        seen: dict[int, tuple[bytes, float]] = {}
        failed_at: float | None = None  # when the store client failed (Note [host heartbeats])
        failure: Exception | None = None
        while not self._stop.wait(self._interval_s):
            now = time.monotonic()
            if failed_at is not None or self._store_gone:
                answer = False if self._store_gone else self._knock()
                if answer is False or now - (failed_at or now) > self.lost_after_s:
                    self._store_gone = True
                    if 0 not in self._done and self._lost is None:
                        why = "refuses connections" if answer is False else f"is unreachable ({failure})"
                        self._lost = f"host 0 lost: the run's store at {self._address} {why}"
                        _log.error("%s", self._lost)
                    return  # no store: nothing more to watch
                if answer is None:
                    continue
                try:
                    store = self._connect()
                except Exception:
                    continue
                failed_at = None
            beats += 1
            try:
                store.set(f"beat/{self._host}", str(beats))
                others = [h for h in range(self._num_hosts) if h != self._host]
                left = {h for h in others if store.check([f"left/{h}"])}
                for h in others:
                    if h in left:
                        self._note_left(store, h)
                        continue
                    key = f"beat/{h}"
                    value = store.get(key) if store.check([key]) else b""
                    if h not in seen or seen[h][0] != value:
                        seen[h] = (value, now)
                    elif now - seen[h][1] > self.lost_after_s and self._lost is None:
                        self._lost = f"host {h} lost: no heartbeat for {now - seen[h][1]:.0f} s"
            except Exception as error:  # the store is gone (its host, 0, with it) or out of reach
                failed_at, failure = now, error
            if self._lost is not None:
                _log.error("%s", self._lost)
                return  # the verdict is in: nothing more to watch

    def _note_left(self, store: Any, host: int) -> None:
        reason = store.get(f"left/{host}").decode()
        if reason == "done":
            self._done.add(host)
        elif self._lost is None:
            order, _, line = reason.partition(" ")
            if self._first_failure is None or int(order) < self._first_failure[0]:
                self._lost = f"host {host} failed: {line}"

    def failed(self, line: str) -> None:
        """Say this host failed with ``line`` (numbered: the run's first failure is named).

        Not to a store that refuses connections at its address (gone: the others cannot hear it);
        a knock with no answer in time is no verdict, so the store is still called, within its
        client's timeout. Either way :meth:`close` then says nothing: a host that failed is never done.
        """
        self._failed = True
        if self._store_gone or self._knock() is False:
            self._store_gone = True  # the watch says so at its next beat, touching no store
            return
        with contextlib.suppress(Exception):
            order = int(self._store.add("failures", 1))
            self._first_failure = (order, line)
            self._store.set(f"left/{self._host}", f"{order} {line}")

    def verdict(self, wait_s: float, should_give_up: Callable[[], bool] = lambda: False) -> str | None:
        """Wait up to ``wait_s`` for a lost host to be named; its line, or None."""
        deadline = time.monotonic() + wait_s
        while self._lost is None and time.monotonic() < deadline and not should_give_up():
            time.sleep(0.1)
        return self._lost

    def close(self) -> None:
        """Stop beating; a host that did not fail says it is done."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self._interval_s + 5.0)
        if not self._failed and not self._store_gone:
            with contextlib.suppress(Exception):
                self._store.set(f"left/{self._host}", "done")
