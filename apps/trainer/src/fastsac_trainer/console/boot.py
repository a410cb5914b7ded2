"""The boot panel: what the asynchronous trainer tells the console while its workers start.

The async trainer calls a :class:`BootView` (the console implements it): one
``worker_state(name, state)`` per change of a worker (``waiting`` for every worker before the first is
spawned, then ``booting`` -> ``ready`` -> ``running``), and
``failed(name, reason, log_path, during_boot=...)`` when a worker dies or the boot deadline passes: the
engine knows whether every worker had been released (training) or not (start-up), and says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from fastsac_trainer.console._format import duration

__all__ = ["BootBoard", "BootFailure", "BootView", "render_boot"]

_STATE_STYLES = {
    "waiting": "dim",
    "booting": "yellow",
    "ready": "green",
    "running": "cyan",
    "failed": "bold red",
}
_READY = ("ready", "running")


class BootView(Protocol):
    """Receives the readiness of workers during boot (implemented by the console)."""

    def worker_state(self, name: str, state: str) -> None:
        """Worker ``name`` (``learner0``, ``collector3``) is now in ``state`` (``booting``...)."""
        ...

    def failed(self, name: str, reason: str, log_path: Path | None, *, during_boot: bool = True) -> None:
        """Worker ``name`` failed for ``reason``, during start-up or after; its error log: ``log_path``."""
        ...


@dataclass(frozen=True)
class BootFailure:
    """Why boot stopped."""

    name: str
    """The worker that failed."""
    reason: str
    """What went wrong, one line."""
    log_path: Path | None
    """The worker's error log, when it has one."""
    during_boot: bool = True
    """False when the worker died after every worker was released (training had started)."""

    def line(self) -> str:
        """The one line printed for the failure (``boot failed: ...`` or ``worker failed: ...``)."""
        mentioned = self.log_path is None or str(self.log_path) in self.reason
        where = "" if mentioned else f"; see {self.log_path}"
        what = "boot failed" if self.during_boot else "worker failed"
        return f"{what}: {self.name}: {self.reason}{where}"


@dataclass
class BootBoard:
    """Readiness of every worker seen so far, in the order they were first reported."""

    states: dict[str, str] = field(default_factory=dict)
    """Worker name -> its latest state."""
    failure: BootFailure | None = None
    """Set once a worker failed."""
    started: float = field(default_factory=time.monotonic)
    """When the board was made (the console's start): the panel counts the seconds of boot from here."""

    def worker_state(self, name: str, state: str) -> None:
        """Record ``name``'s new state."""
        self.states[name] = state

    def failed(self, name: str, reason: str, log_path: Path | None, *, during_boot: bool = True) -> None:
        """Record a failure (the first one is kept)."""
        self.states[name] = "failed"
        if self.failure is None:
            self.failure = BootFailure(name, reason, log_path, during_boot)

    @property
    def ready_count(self) -> int:
        """Workers that reported ready (or were released)."""
        return sum(state in _READY for state in self.states.values())


def render_boot(board: BootBoard, title: str) -> RenderableType:
    """The boot panel: a worker/status table and a gate line, in a frame titled ``title``."""
    table = Table(expand=True, show_edge=False, pad_edge=False)
    table.add_column("worker")
    table.add_column("status")
    for name, state in board.states.items():
        table.add_row(name, Text(state, style=_STATE_STYLES.get(state, "")))
    total = len(board.states)
    if board.failure is not None:
        gate = Text(board.failure.line(), style="bold red")
    else:
        waited = duration(time.monotonic() - board.started)
        gate = Text(f"{board.ready_count}/{total} workers ready · {waited}", style="dim")
    return Panel(Group(table, gate), title=f"{title} · boot", border_style="cyan")
