"""``StartupHandshake``: one-shot delivery of each reader's transport handles, and a start barrier.

Created by the parent with a multiprocessing context and passed to children as a ``Process``
argument (its queues and events pickle only that way). A *reader* is a worker that receives exactly
one startup message (in fastsac: each collector, its ring and weight handles, and the evaluator, a
weight handle). Learners ``ship`` one message per reader (a CUDA-IPC handle pickles its device tensor
through torch's reducers); each reader ``receive``s its own. Every worker ``report_ready``s and
``wait_released``; the parent ``wait_all_ready`` then ``release``s. Every wait is bounded and polls
``should_stop`` at least every ``_POLL_S`` seconds.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch.multiprocessing  # noqa: F401  (registers torch's tensor reducers, CUDA-IPC included)

from shm_transport.exceptions import HandshakeAborted, HandshakeError, HandshakeTimeout

__all__ = ["StartupHandshake"]

_POLL_S = 0.05
"""Longest pause between two ``should_stop`` checks (well under the 0.5 s abort promise)."""


class StartupHandshake:
    """Per-reader one-shot mailboxes plus a readiness barrier released by the parent.

    Args:
        ctx: the multiprocessing context the workers are started with.
        readers: names of the workers that each receive exactly one message (collectors, evaluators).
        workers: names of every worker that reports ready (readers and learners).
        barrier: False makes ``wait_released`` return at once (one reader driven by hand).
    """

    def __init__(
        self, ctx: Any, *, readers: Sequence[str], workers: Sequence[str], barrier: bool = True
    ) -> None:
        if len(set(readers)) != len(readers) or len(set(workers)) != len(workers):
            raise HandshakeError(f"duplicate names: readers={list(readers)}, workers={list(workers)}")
        self._readers = tuple(readers)
        self._workers = tuple(workers)
        self._barrier = barrier
        self._mailboxes = {name: ctx.Queue(maxsize=1) for name in self._readers}
        self._shipped = ctx.Array("b", max(1, len(self._readers)))
        self._ready = ctx.Queue()
        self._released = ctx.Event()
        self._received: set[str] = set()

    # ------------------------------------------------------------------------------- mailboxes
    def _index(self, reader: str) -> int:
        try:
            return self._readers.index(reader)
        except ValueError:
            raise HandshakeError(
                f"reader {reader!r} is not part of the handshake; known readers: {list(self._readers)}"
            ) from None

    def ship(self, reader: str, payload: Any) -> None:
        """Send ``reader`` its one startup message (from its learner).

        Raises:
            HandshakeError: unknown reader, or a message was already shipped to it.
        """
        index = self._index(reader)
        with self._shipped.get_lock():
            if self._shipped[index]:
                raise HandshakeError(
                    f"a startup message was already shipped to reader {reader!r}; each reader gets "
                    "exactly one (put every handle it needs into that one payload)"
                )
            self._shipped[index] = 1
        self._mailboxes[reader].put(payload)

    def receive(self, reader: str, *, timeout_s: float, should_stop: Callable[[], bool] | None = None) -> Any:
        """Wait (bounded) for ``reader``'s startup message and return it.

        Raises:
            HandshakeTimeout: nothing arrived within ``timeout_s``.
            HandshakeAborted: ``should_stop()`` turned true.
            HandshakeError: the message was already received in this process.
        """
        self._index(reader)
        if reader in self._received:
            raise HandshakeError(f"reader {reader!r} already received its startup message")
        mailbox = self._mailboxes[reader]
        deadline = time.monotonic() + timeout_s
        while True:
            if should_stop is not None and should_stop():
                raise HandshakeAborted(f"reader {reader!r} stopped waiting for its startup message")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise HandshakeTimeout(
                    f"reader {reader!r} received no startup message within timeout_s={timeout_s}; its "
                    "learner probably failed to start (see the learner's error log)"
                )
            try:
                payload = mailbox.get(timeout=min(_POLL_S, remaining))
            except queue.Empty:
                continue
            self._received.add(reader)
            return payload

    # --------------------------------------------------------------------------------- barrier
    def report_ready(self, worker: str) -> None:
        """Tell the parent that ``worker`` finished its start-up."""
        if worker not in self._workers:
            raise HandshakeError(
                f"worker {worker!r} is not part of the handshake; known: {list(self._workers)}"
            )
        self._ready.put(worker)

    def wait_all_ready(
        self,
        *,
        timeout_s: float,
        should_stop: Callable[[], bool] | None = None,
        on_ready: Callable[[str], None] | None = None,
    ) -> None:
        """Parent: wait until every worker reported ready, calling ``on_ready(name)`` as each does.

        Raises:
            HandshakeTimeout: naming every worker that did not report within ``timeout_s``.
            HandshakeAborted: ``should_stop()`` turned true (noticed within ``_POLL_S``).
        """
        missing = set(self._workers)
        deadline = time.monotonic() + timeout_s
        while missing:
            if should_stop is not None and should_stop():
                raise HandshakeAborted(f"stopped while waiting for workers {sorted(missing)} to report ready")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise HandshakeTimeout(
                    f"workers {sorted(missing)} did not report ready within timeout_s={timeout_s}; see their "
                    "logs (a worker that failed during start-up never reports)"
                )
            try:
                worker = self._ready.get(timeout=min(_POLL_S, remaining))
            except queue.Empty:
                continue
            missing.discard(worker)
            if on_ready is not None:
                on_ready(worker)

    def release(self) -> None:
        """Parent: let every worker waiting in ``wait_released`` start."""
        self._released.set()

    def wait_released(self, *, timeout_s: float, should_stop: Callable[[], bool] | None = None) -> None:
        """Worker: wait for the parent's ``release`` (returns at once when ``barrier=False``).

        Raises:
            HandshakeTimeout: not released within ``timeout_s``.
            HandshakeAborted: ``should_stop()`` turned true.
        """
        if not self._barrier:
            return
        deadline = time.monotonic() + timeout_s
        while not self._released.wait(timeout=min(_POLL_S, max(0.0, deadline - time.monotonic()))):
            if should_stop is not None and should_stop():
                raise HandshakeAborted("stopped while waiting for the parent to release the start barrier")
            if time.monotonic() >= deadline:
                raise HandshakeTimeout(
                    f"the parent did not release the start barrier within timeout_s={timeout_s}; another "
                    "worker probably failed to start (see the parent's log)"
                )

    def close(self) -> None:
        """Close the queues in this process (idempotent).

        Nothing is drained: a payload holding CUDA-IPC tensors must not be unpickled by a process
        (the parent) that has no business initialising CUDA. Payloads are handles (a few hundred
        bytes), which fit in the pipe, so an unreceived message never blocks a shipping process's exit.
        """
        for box in (*self._mailboxes.values(), self._ready):
            box.close()
