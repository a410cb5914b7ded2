"""Opening the console, fanning reports out to several reporters, and routing logging to the console."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TextIO

from rich.console import Console

from fastsac_trainer.console.boot import BootFailure
from fastsac_trainer.console.live import RichConsole
from fastsac_trainer.console.plain import PlainConsole
from fastsac_trainer.reporting import EvalPoint, Reporter, Snapshot

__all__ = ["ConsoleLogHandler", "FanOut", "TrainerConsole", "open_console"]

RUN_LOG_ONLY = ("fastsac_async.evaluator",)
"""Loggers whose records go to the run's log file and never to the console: the evaluator's. An
asynchronous run's evaluator writes them to its own log (``logs/evaluator.log``); a synchronous run's
evaluates in the trainer's process, so ``logs/trainer.log`` has them. Either way the console says each
evaluation through the reporter (its ``eval @`` line, and ``EvalLog``'s one line for a failed clip),
never the evaluator's reports or a failed clip's traceback."""


class TrainerConsole(Protocol):
    """What the CLI and the trainers use of a console: a Reporter, a BootView and a message sink."""

    def __enter__(self) -> TrainerConsole: ...

    def __exit__(self, *exc: object) -> None: ...

    def info(self, message: str) -> None:
        """Show one message of the parent."""
        ...

    def stop_requested(self, reason: str = "SIGINT") -> None:
        """Show that a clean stop was requested (``reason``: the signal's name)."""
        ...

    def worker_state(self, name: str, state: str) -> None:
        """A worker's boot state changed."""
        ...

    def failed(self, name: str, reason: str, log_path: Path | None, *, during_boot: bool = True) -> None:
        """A worker failed, during start-up or after every worker was released."""
        ...

    @property
    def failure(self) -> BootFailure | None:
        """The boot failure, if any."""
        ...

    def report(self, snapshot: Snapshot) -> None:
        """Take one snapshot."""
        ...

    def evaluated(self, point: EvalPoint) -> None:
        """An evaluation finished."""
        ...

    def checkpoint_saved(self, path: Path) -> None:
        """A checkpoint was written."""
        ...

    def close(self) -> None:
        """Stop drawing and restore the terminal."""
        ...


def open_console(mode: str, title: str, stream: TextIO | None = None) -> TrainerConsole:
    """A rich console for ``rich`` (or ``auto`` on a TTY), else a plain one.

    Args:
        mode: ``auto``, ``rich`` or ``plain`` (validated by the config).
        title: Panel title.
        stream: Output stream (stdout by default).
    """
    out = sys.stdout if stream is None else stream
    if mode == "rich" or (mode == "auto" and out.isatty()):
        return RichConsole(Console(file=out), title)
    return PlainConsole(out, title)


class FanOut:
    """One :class:`~fastsac_trainer.reporting.Reporter` that forwards to several."""

    def __init__(self, reporters: Sequence[Reporter]) -> None:
        self._reporters = tuple(reporters)

    def report(self, snapshot: Snapshot) -> None:
        """Forward to every reporter."""
        for reporter in self._reporters:
            reporter.report(snapshot)

    def evaluated(self, point: EvalPoint) -> None:
        """Forward to every reporter."""
        for reporter in self._reporters:
            reporter.evaluated(point)

    def checkpoint_saved(self, path: Path) -> None:
        """Forward to every reporter."""
        for reporter in self._reporters:
            reporter.checkpoint_saved(path)

    def close(self) -> None:
        """Close every reporter, even if one fails (the first error is raised afterwards)."""
        first: BaseException | None = None
        for reporter in self._reporters:
            try:
                reporter.close()
            except Exception as error:  # closing the rest matters more than the order of errors.
                first = first or error
        if first is not None:
            raise first


class ConsoleLogHandler(logging.Handler):
    """Sends the parent's log records through the console, so they print above a live panel.

    Records of the :data:`RUN_LOG_ONLY` loggers are left to the run's log file.
    """

    def __init__(self, console: TrainerConsole, level: int = logging.INFO) -> None:
        super().__init__(level)
        self._console = console
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self.addFilter(_not_run_log_only)

    def emit(self, record: logging.LogRecord) -> None:
        """Format ``record`` and show it."""
        try:
            self._console.info(self.format(record))
        except Exception:  # logging must never take the run down.
            self.handleError(record)


def _not_run_log_only(record: logging.LogRecord) -> bool:
    """Whether ``record`` may go to the console: it is of none of the :data:`RUN_LOG_ONLY` loggers."""
    return not any(record.name == name or record.name.startswith(f"{name}.") for name in RUN_LOG_ONLY)
