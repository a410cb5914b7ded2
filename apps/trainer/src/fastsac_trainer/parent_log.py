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

import contextlib
import io
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, cast

if TYPE_CHECKING:
    from fastsac_trainer.console import PlainConsole

__all__ = ["ParentLog"]

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""How a log record reads in ``logs/trainer.log`` (a console line is written as it is)."""


class ParentLog:
    """``logs/trainer.log`` of one launch, kept in memory until the run folder is known (Note above).

    Entering it routes the parent's log records (INFO and up) into it; leaving it stops that and
    closes the file. Its writes never raise: a file that cannot be written (a full disk) is said once
    on stderr, and the launch goes on (its own error, if it ends with one, stays the one it prints).
    Every method takes the handler's lock, which an emit of another thread holds too
    (``logging.Handler.handle``): no record is lost or written into a closed file.
    """

    def __init__(self) -> None:
        self._early: list[str] = []  # what came before open(), in order
        self._path: Path | None = None  # the file, once open() was called
        self._file: TextIO | None = None  # None before open(), after the end, or when it cannot be opened
        self._ended = False
        self._unwritable = False  # stderr said so already
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
        root = logging.getLogger()
        # Outside the handler's lock: removeHandler takes logging's module lock, which an emit holding
        # the handler's lock may wait for (``_Keeper._taken_elsewhere``).
        root.removeHandler(self._handler)
        root.setLevel(self._previous_level)
        with self._locked():
            if isinstance(error, Exception) and self._file is not None:
                # The launch ended with an error its caller prints (``error: ...``): the log tells it
                # too, with its traceback. Written as a record would be, but to the file only: stderr
                # gets it once.
                ended = logging.LogRecord("trainer", logging.ERROR, __file__, 0, "ended: %s", (error,), None)
                ended.exc_info = (type(error), error, error.__traceback__)
                self._put(f"{self._handler.format(ended)}\n")
            self._ended = True
            self._early.clear()
            if self._file is not None:
                file, self._file = self._file, None
                try:
                    file.close()
                except OSError as failed:  # what was still buffered
                    self._cannot_write(failed)

    def write(self, line: str) -> None:
        """Put ``line`` into the log (kept until :meth:`open`; dropped once the launch ended)."""
        with self._locked():
            if self._path is None and not self._ended:
                self._early.append(line)
            else:
                self._put(f"{line}\n")

    def say(self, line: str) -> None:
        """Print ``line`` on stdout and put it into the log."""
        sys.stdout.write(f"{line}\n")
        sys.stdout.flush()
        self.write(line)

    def open(self, run_dir: Path) -> None:
        """Append to ``run_dir``'s ``logs/trainer.log`` from now on, what was kept so far first."""
        from fastsac_async import RunLayout

        with self._locked():
            self._path = RunLayout(run_dir).parent_log
            early, self._early = self._early, []
            try:
                self._file = self._path.open("a", encoding="utf-8", buffering=1)
            except OSError as error:
                self._cannot_write(error)
                return
            self._put("".join(f"{line}\n" for line in early))

    def console(self, title: str) -> PlainConsole:
        """A plain console writing into the log: it keeps every console line, even once stdout is gone.

        From now on the run's console shows the records; this log no longer echoes warnings to stderr.
        """
        from fastsac_trainer.console import PlainConsole

        assert self._path is not None, "open() the log first"
        self.echo = False
        return PlainConsole(cast("TextIO", _Lines(self._put_locked)), title, min_interval_s=0.0)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the handler's lock (reentrant: an emit of this thread holds it already)."""
        self._handler.acquire()
        try:
            yield
        finally:
            self._handler.release()

    def _put_locked(self, text: str) -> None:
        """:meth:`_put` under the lock (the console's writes)."""
        with self._locked():
            self._put(text)

    def _put(self, text: str) -> None:
        """Write ``text`` into the open file, if any; a failure is said once, never raised. Lock held."""
        if self._file is None:
            return
        try:
            self._file.write(text)
        except OSError as error:
            self._cannot_write(error)
        except (RuntimeError, ValueError):
            # A signal handler's line while this thread was inside the same write (the buffered file
            # refuses a reentrant call), or a file closed under it: that one line is lost, not the run.
            pass

    def _cannot_write(self, error: OSError) -> None:
        """Say once on stderr that the log could not be written: the launch goes on. Lock held."""
        if self._unwritable:
            return
        self._unwritable = True
        reason = error.strerror or str(error)
        with contextlib.suppress(OSError, ValueError):  # stderr gone too: nothing left to tell
            sys.stderr.write(
                f"warning: the run's log {self._path} could not be written ({reason}); the run goes on, "
                "the lines it could not take are missing from it\n"
            )
            sys.stderr.flush()


class _Lines(io.TextIOBase):
    """The text stream of :meth:`ParentLog.console`: its writes go through the log (locked, never raising)."""

    def __init__(self, put: Callable[[str], None]) -> None:
        super().__init__()
        self._put = put

    def writable(self) -> bool:
        """Always (what cannot be written is said once and dropped)."""
        return True

    def write(self, text: str) -> int:
        """Write ``text`` into the log's file as it is."""
        self._put(text)
        return len(text)


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
