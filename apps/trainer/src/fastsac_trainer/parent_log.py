"""The parent's log, ``logs/trainer.log``: each record (INFO and up) and console line of a run, from launch.

# Note [the parent's log tells the whole story]
A run's folder exists only once its config is composed, its resume checked and its placement resolved,
and the launch prints what it will do (the config's notes, the placement, the run folder, the resume
line) before the trainer starts. A :class:`ParentLog` is entered when the launch begins: until the run
folder is known it keeps every record and every line the launch says (:meth:`ParentLog.say`); then
:meth:`ParentLog.open` writes them, in order, at the head of this launch's part of ``logs/trainer.log``,
and from there on everything goes straight to the file, the console's lines and the boot lines
included (:meth:`ParentLog.console`). What a launch that never gets a run folder kept (a refused
config) is dropped: the console said it. Until the console exists, a warning also reaches stderr as
Python shows a record that no handler takes (``logging.lastResort``); from then on the console shows
the records, and the run's last line is printed once.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from fastsac_trainer.console import PlainConsole

__all__ = ["ParentLog"]

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""How a log record reads in ``logs/trainer.log`` (a console line is written as it is)."""


class ParentLog:
    """``logs/trainer.log`` of one launch, kept in memory until the run folder is known (Note above).

    Entering it routes the parent's log records (INFO and up) into it; leaving it stops that and
    closes the file.
    """

    def __init__(self) -> None:
        self._early: list[str] = []  # what came before open(), in order
        self._file: TextIO | None = None
        self._handler = _Keeper(self)
        self.echo = True
        """Whether warnings also go to stderr (no console yet): see :meth:`console`."""
        self._previous_level = logging.NOTSET

    def __enter__(self) -> ParentLog:
        root = logging.getLogger()
        self._previous_level = root.level
        root.addHandler(self._handler)
        root.setLevel(logging.INFO)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> None:
        if isinstance(error, Exception) and self._file is not None:
            # The launch ended with an error its caller prints (``error: ...``): the log tells it too,
            # with its traceback. Written as a record would be, but to the file only: stderr gets it once.
            ended = logging.LogRecord("trainer", logging.ERROR, __file__, 0, "ended: %s", (error,), None)
            ended.exc_info = (type(error), error, error.__traceback__)
            self.write(self._handler.format(ended))
        root = logging.getLogger()
        root.removeHandler(self._handler)
        root.setLevel(self._previous_level)
        self._early.clear()
        if self._file is not None:
            self._file.close()
            self._file = None

    def write(self, line: str) -> None:
        """Put ``line`` into the log (kept until :meth:`open`)."""
        if self._file is None:
            self._early.append(line)
        else:
            self._file.write(f"{line}\n")

    def say(self, line: str) -> None:
        """Print ``line`` on stdout and put it into the log."""
        sys.stdout.write(f"{line}\n")
        sys.stdout.flush()
        self.write(line)

    def open(self, run_dir: Path) -> None:
        """Append to ``run_dir``'s ``logs/trainer.log`` from now on, what was kept so far first."""
        from fastsac_async import RunLayout

        self._file = RunLayout(run_dir).parent_log.open("a", encoding="utf-8", buffering=1)
        early, self._early = self._early, []
        for line in early:
            self._file.write(f"{line}\n")

    def console(self, title: str) -> PlainConsole:
        """A plain console writing into the log: it keeps every console line, even once stdout is gone.

        From now on the run's console shows the records; this log no longer echoes warnings to stderr.
        """
        from fastsac_trainer.console import PlainConsole

        assert self._file is not None, "open() the log first"
        self.echo = False
        return PlainConsole(self._file, title, min_interval_s=0.0)


class _Keeper(logging.Handler):
    """Puts each record into a :class:`ParentLog`; shows a warning on stderr while nothing else would."""

    def __init__(self, log: ParentLog) -> None:
        super().__init__(logging.INFO)
        self._log = log
        self.setFormatter(logging.Formatter(_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        """Keep ``record``; also show it on stderr if no other handler takes it and it is a warning."""
        try:
            self._log.write(self.format(record))
        except Exception:  # logging must never take the run down
            self.handleError(record)
        last_resort = logging.lastResort
        if last_resort is None or not self._log.echo or record.levelno < last_resort.level:
            return
        if not self._taken_elsewhere(record):
            last_resort.handle(record)

    def _taken_elsewhere(self, record: logging.LogRecord) -> bool:
        """Whether a handler other than this one sees ``record`` (Python's own test for ``lastResort``)."""
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if any(handler is not self for handler in logger.handlers):
                return True
            logger = logger.parent if logger.propagate else None
        return False
