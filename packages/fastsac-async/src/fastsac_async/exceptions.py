"""Errors of the asynchronous engine: each names what went wrong, the value seen and what to do."""

from __future__ import annotations

import signal
from pathlib import Path

__all__ = ["AsyncConfigError", "AsyncEngineError", "BootTimeoutError", "RunAborted", "WorkerFailed"]


class AsyncEngineError(RuntimeError):
    """Base class of every error raised by fastsac-async."""


class AsyncConfigError(AsyncEngineError, ValueError):
    """An engine setting is invalid (the message names the setting, the value and the fix).

    Attributes:
        setting: The :class:`~fastsac_async.AsyncOptions` field at fault (None for other settings,
            such as an environment variable).
        value: The value seen.
        fix: What to do instead (the part of the message after "is invalid: ").
    """

    def __init__(
        self, message: str, *, setting: str | None = None, value: object = None, fix: str = ""
    ) -> None:
        super().__init__(message)
        self.setting = setting
        self.value = value
        self.fix = fix

    @classmethod
    def of_option(cls, setting: str, value: object, fix: str) -> AsyncConfigError:
        """The error of an ``AsyncOptions`` field: ``async_options.<setting>=<value> is invalid: <fix>``.

        Args:
            setting: The field.
            value: The value seen.
            fix: What to do instead.
        """
        return cls(
            f"async_options.{setting}={value!r} is invalid: {fix}", setting=setting, value=value, fix=fix
        )


class WorkerFailed(AsyncEngineError):  # noqa: N818 (the name the app and the issue use)
    """A worker process exited unexpectedly; the run was stopped.

    Its message is ``worker <worker> <reason>`` (``worker <worker> failed: <reason>`` when the reason
    starts with an env's exception: ``worker collector0 failed: Pendulum-v1's step() raised ...``).
    Which of the two it is, the worker's error log says (``in_env``: Note [error log header] in
    :mod:`fastsac_async.worker_process`), never the line's wording.

    Attributes:
        worker: Name of the worker (``collector1``, ``learner0``).
        exitcode: Its exit code; negative for death by signal (``-9`` for SIGKILL), None if unknown.
        error_log: Path of its traceback file (``async_errors/<worker>_error.log``), which may not
            exist when the worker was killed by a signal.
        log_path: Path of its log file (``logs/<worker>.log``).
        during_boot: Whether it failed before every worker was released (start-up), not while training.
        error: The exception it raised, one line (``ValueError: bad action``, or an env's exception as
            ``Pendulum-v1's step() raised ValueError: bad action (raised at myenv.py:49 in step)``); None
            when it wrote none (killed by a signal).
        in_env: Whether ``error`` is an env's exception (its line says "raised" already).
        reason: What happened, without the worker's name: the exception, the exit status, when, and
            where the traceback and the log are.
    """

    def __init__(
        self,
        worker: str,
        exitcode: int | None,
        error_log: Path,
        log_path: Path,
        *,
        during_boot: bool = False,
        error: str | None = None,
        in_env: bool = False,
        detail: str = "",
    ) -> None:
        self.worker = worker
        self.exitcode = exitcode
        self.error_log = error_log
        self.log_path = log_path
        self.during_boot = during_boot
        self.error = error
        self.in_env = in_env = error is not None and in_env
        status = describe_exit(exitcode)
        what = status if error is None else f"{'' if in_env else 'raised '}{error} ({status})"
        self.reason = (
            what
            + (" during start-up" if during_boot else "")
            + "; "
            + (detail + "; " if detail else "")
            + (
                f"traceback in {error_log}"
                if error_log.exists()
                else f"no traceback was written (expected at {error_log})"
            )
            + f"; its log is {log_path}"
        )
        super().__init__(f"worker {worker} {'failed: ' if in_env else ''}{self.reason}")


class BootTimeoutError(AsyncEngineError):
    """Workers did not report ready within ``async_options.boot_timeout_s``."""

    def __init__(self, waiting_for: list[str], timeout_s: float, logs_dir: Path) -> None:
        self.waiting_for = waiting_for
        super().__init__(
            f"workers {', '.join(waiting_for)} did not report ready within "
            f"async_options.boot_timeout_s={timeout_s:g}; read their logs in {logs_dir} "
            "or raise boot_timeout_s for slow first-time compilation"
        )


class RunAborted(AsyncEngineError):  # noqa: N818 (it is an outcome, not a fault)
    """The run was stopped at once (``should_abort``): every worker is gone, no final checkpoint.

    The checkpoints written before are intact.
    """


def describe_exit(exitcode: int | None) -> str:
    """Human words for a process exit code (``exited with code 1``, ``was killed by signal 9 (SIGKILL)``)."""
    if exitcode is None:
        return "failed (exit status not known yet: it was still shutting down)"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-exitcode} ({name})"
    return f"exited with code {exitcode}"
