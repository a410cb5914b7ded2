"""The console on a TTY: a rich ``Live`` view with the boot panel, then the tabbed training panel."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

from rich.console import Console, RenderableType
from rich.live import Live
from rich.text import Text

from fastsac_trainer.console._keys import KeyReader
from fastsac_trainer.console.boot import BootBoard, BootFailure, render_boot
from fastsac_trainer.console.panels import TABS, render_training
from fastsac_trainer.console.system import SystemSample, SystemSampler
from fastsac_trainer.reporting import EvalPoint, Snapshot

__all__ = ["RichConsole"]

_SYSTEM_PERIOD_S = 1.0


class RichConsole:
    """Live boot and training panels (tabs on keys 1/2/3), refreshed 4 times a second.

    While the view is live, the parent's stdout/stderr and its logging (through
    :meth:`info`) print above the panel, so nothing tears it; workers write to their log files.

    Args:
        console: The rich console to draw on.
        title: Frame title (``humanoid/fastsac``).
        keys: Read tab keys from stdin (only happens when stdin is a TTY).
        live: Use a live view (False renders frames only on demand, for tests).
    """

    def __init__(self, console: Console, title: str, *, keys: bool = True, live: bool = True) -> None:
        self.console = console
        self._title = title
        self._lock = threading.Lock()
        self.board = BootBoard()
        self.tab = 0
        self._snapshot: Snapshot | None = None
        self._first: Snapshot | None = None
        self._checkpoint: Path | None = None
        self._stopping = False
        self._sampler = SystemSampler()
        self._system: SystemSample | None = None
        self._system_t = -float("inf")
        self._keys = KeyReader(self._on_key) if keys else None
        self._live: Live | None = None  # Live renders once while it is being built
        self._live = (
            Live(
                get_renderable=self.renderable,
                console=console,
                refresh_per_second=4,
                redirect_stdout=True,
                redirect_stderr=True,
            )
            if live
            else None
        )

    def __enter__(self) -> RichConsole:
        if self._live is not None:
            self._live.start()
        if self._keys is not None:
            self._keys.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _on_key(self, key: str) -> None:
        if key in ("1", "2", "3"):
            self.tab = int(key) - 1

    def info(self, message: str) -> None:
        """Print a message of the parent above the live panel."""
        self.console.print(Text(message))

    def stop_requested(self, reason: str = "SIGINT") -> None:
        """Mark the panel as stopping (first stop signal); no printing from the signal handler."""
        self._stopping = True

    def worker_state(self, name: str, state: str) -> None:
        """Update a worker's row of the boot table."""
        with self._lock:
            self.board.worker_state(name, state)

    def failed(self, name: str, reason: str, log_path: Path | None, *, during_boot: bool = True) -> None:
        """Show a worker's failure in the gate line (the CLI prints its line once after the view closes)."""
        with self._lock:
            self.board.failed(name, reason, log_path, during_boot=during_boot)

    @property
    def failure(self) -> BootFailure | None:
        """The boot failure, if a worker failed."""
        return self.board.failure

    def report(self, snapshot: Snapshot) -> None:
        """Show ``snapshot`` (the view switches from boot to training on the first one)."""
        with self._lock:
            if self._first is None:
                self._first = snapshot
            self._snapshot = snapshot

    def evaluated(self, point: EvalPoint) -> None:
        """Show the evaluation in the panel now (the next snapshot carries it too)."""
        with self._lock:
            if self._snapshot is not None:  # a copy: the snapshot itself is every reporter's
                self._snapshot = dataclasses.replace(self._snapshot, last_eval=point)

    def checkpoint_saved(self, path: Path) -> None:
        """Show the "✓ saved checkpoint" line."""
        with self._lock:
            self._checkpoint = path

    def _title_text(self) -> str:
        return f"{self._title} · stopping (Ctrl+C again stops at once)" if self._stopping else self._title

    def renderable(self) -> RenderableType:
        """The current frame: the boot panel until the first snapshot, then the training panel.

        Nothing once the output is gone (a closed pipe or terminal: see ``GuardedStream``).
        """
        if getattr(self.console.file, "lost", False):
            return Text("")
        with self._lock:
            if self._snapshot is None and self.board.states:
                return render_boot(self.board, self._title_text())
            if self.tab == 2 and self._live is not None:
                self._refresh_system()
            return render_training(
                self._snapshot,
                tab=self.tab,
                title=f"{self._title_text()} · {TABS[self.tab]} (keys 1/2/3)",
                first=self._first,
                system=self._system if self._live is not None else self._sampler.sample(),
                last_checkpoint=self._checkpoint,
            )

    def _refresh_system(self) -> None:
        now = time.monotonic()
        if now - self._system_t >= _SYSTEM_PERIOD_S:
            self._system = self._sampler.sample()
            self._system_t = now

    def close(self) -> None:
        """Stop the live view (its last frame stays), restore the terminal and release NVML."""
        if self._keys is not None:
            self._keys.stop()
        if self._live is not None and self._live.is_started:
            self._live.stop()
        self._sampler.close()
