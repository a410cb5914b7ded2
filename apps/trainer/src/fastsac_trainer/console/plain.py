"""The console without a TTY: plain periodic log lines (CI, pipes, ``console=plain``).

# Note [fresh fields]
A line shows only what was measured since the previous line. Its counters (iteration, steps, elapsed,
time left) are the snapshot's own; each other field (return, rates, lag, losses, ...) is shown with
its latest value measured since the previous line, and left out when none was (``return`` and
``ep_len`` then read ``-``), never repeated from an older interval. A snapshot says which of its
scalars were not measured in its interval (``Snapshot.stale``: their source did not report), and the
console keeps the fields measured by every snapshot since its last line, also those it did not print
a line for (one line per ``min_interval_s`` at most). So ``it 100`` never shows the statistics of
``it 53``.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from pathlib import Path
from typing import TextIO

from fastsac_trainer.console._format import compact, duration, metric
from fastsac_trainer.console.boot import BootBoard, BootFailure
from fastsac_trainer.console.panels import eta_s
from fastsac_trainer.reporting import EvalPoint, Snapshot

__all__ = ["PlainConsole", "snapshot_line"]

_LINE_KEYS = (
    ("env/s", "perf/env_steps_per_s"),
    ("upd/s", "perf/updates_per_s"),
    ("utd", "async/utd"),
    ("learn%", "perf/learn_pct"),
    ("wait%", "perf/collector_wait_pct"),
    ("lag", "async/policy_lag"),
    ("ring", "async/ring_fill"),
    ("qf_loss", "train/qf_loss"),
    ("alpha", "train/alpha"),
)


def snapshot_line(snapshot: Snapshot, first: Snapshot | None = None) -> str:
    """One log line: progress, returns (the last evaluation's too), throughput and the main metrics.

    Scalars the snapshot lists as ``stale`` are left out (Note [fresh fields]).
    """
    s = {key: value for key, value in snapshot.scalars.items() if key not in snapshot.stale}
    pct = 100 * snapshot.env_steps / snapshot.total_env_steps if snapshot.total_env_steps else 0.0
    parts = [
        f"it {snapshot.iteration} ({pct:.1f}%)",
        f"steps {compact(snapshot.env_steps)}/{compact(snapshot.total_env_steps)}",
        f"return {compact(s.get('rollout/mean_return'))}",
        f"ep_len {compact(s.get('rollout/mean_ep_len'))}",
    ]
    if snapshot.last_eval is not None:
        e = snapshot.last_eval
        parts.append(
            f"eval {compact(e.mean_return)} @ {compact(e.env_steps)} (best {compact(e.best_return)})"
        )
    parts += [f"{label} {metric(key, s[key])}" for label, key in _LINE_KEYS if key in s]
    if snapshot.warming_up:
        parts.append("warming up")
    parts.append(f"elapsed {duration(snapshot.elapsed_s)} ~left {duration(eta_s(snapshot, first))}")
    return " | ".join(parts)


class PlainConsole:
    """Writes log lines to ``stream``.

    One line per snapshot (at most every ``min_interval_s``), per boot state change, per checkpoint,
    and per message of the parent.

    Args:
        stream: Where lines go (stdout).
        title: Prefix of the first line (``humanoid/fastsac``).
        min_interval_s: Shortest gap between two snapshot lines; the last one is always written.
    """

    def __init__(self, stream: TextIO, title: str, min_interval_s: float = 1.0) -> None:
        self._stream = stream
        self._title = title
        self._min_interval_s = min_interval_s
        self._last_line_t = -float("inf")
        self._first: Snapshot | None = None
        self._pending: Snapshot | None = None
        self._measured: dict[str, float] = {}  # fields measured since the last line (Note [fresh fields])
        self._queued_lines: collections.deque[str] = collections.deque()  # see _write
        self._writing = False
        self.board = BootBoard()
        self._last_checkpoint: Path | None = None

    def __enter__(self) -> PlainConsole:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, line: str) -> None:
        # A signal's handler runs between two bytecodes of this thread, possibly inside a write, and
        # writes the stop request's line: a buffered stream refuses that reentrant write (RuntimeError,
        # seen when a closed terminal sent SIGHUP mid-line). A line that comes during a write is queued
        # and written by the write in progress.
        self._queued_lines.append(line)
        while self._queued_lines and not self._writing:
            self._writing = True
            try:
                while self._queued_lines:
                    self._stream.write(self._queued_lines.popleft() + "\n")
                self._stream.flush()
            finally:
                self._writing = False

    def info(self, message: str) -> None:
        """Write one message of the parent."""
        self._write(message)

    def stop_requested(self, reason: str = "SIGINT") -> None:
        """Say that a clean stop was requested (``reason``: the signal, ``SIGINT`` for Ctrl+C)."""
        self._write(f"stop requested ({reason}): finishing with a final checkpoint (again: stop at once)")

    def worker_state(self, name: str, state: str) -> None:
        """Write a worker's new boot state (``waiting``, before any worker is spawned, only counts)."""
        self.board.worker_state(name, state)
        if state != "waiting":
            self._write(f"boot: {name} {state} ({self.board.ready_count}/{len(self.board.states)} ready)")

    def failed(self, name: str, reason: str, log_path: Path | None, *, during_boot: bool = True) -> None:
        """Record a worker's failure, during start-up or not (the CLI prints its line once, on stderr)."""
        self.board.failed(name, reason, log_path, during_boot=during_boot)

    @property
    def failure(self) -> BootFailure | None:
        """The boot failure, if a worker failed."""
        return self.board.failure

    def report(self, snapshot: Snapshot) -> None:
        """Write a line for ``snapshot`` unless the previous one is younger than ``min_interval_s``."""
        if self._first is None:
            self._first = snapshot
        self._measured.update({k: v for k, v in snapshot.scalars.items() if k not in snapshot.stale})
        now = time.monotonic()
        if now - self._last_line_t < self._min_interval_s:
            self._pending = snapshot
            return
        self._last_line_t = now
        self._pending = None
        self._write_line(snapshot)

    def _write_line(self, snapshot: Snapshot) -> None:
        """The line of ``snapshot``'s counters and the fields measured since the last line."""
        measured = dataclasses.replace(snapshot, scalars=self._measured, stale=frozenset())
        self._measured = {}
        self._write(f"[{self._title}] {snapshot_line(measured, self._first)}")

    def evaluated(self, point: EvalPoint) -> None:
        """Write one line for the evaluation (its clip's file too)."""
        clip = "" if point.video is None else f", clip {point.video}"
        self._write(
            f"eval @ {compact(point.env_steps)} steps (it {point.iteration}): "
            f"return {compact(point.mean_return)}, ep_len {compact(point.mean_length)}, "
            f"best {compact(point.best_return)} ({point.seconds:.1f} s{clip})"
        )

    def checkpoint_saved(self, path: Path) -> None:
        """Write the checkpoint line (once per path: trainers may repeat the latest one)."""
        if path != self._last_checkpoint:
            self._last_checkpoint = path
            self._write(f"✓ saved checkpoint {path}")

    def close(self) -> None:
        """Write the last snapshot if its line was held back."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._write_line(pending)
