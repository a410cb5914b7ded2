"""Command line entry point of the trainer: ``uv run trainer [task=NAME] [key=value ...]``.

Two doors: :func:`command` is the ``trainer`` command itself (the console script, ``python apps/trainer``,
``python -m fastsac_trainer``), which owns its process; :func:`main` is the same command called from
Python (a script, a test), which installs no process-wide signal handling that outlives the call.

Subcommands are dispatched on the first argument before hydra sees anything: ``trainer eval ...``,
``trainer export ...``, ``trainer plot ...`` (each with ``--help``, from ``fastsac_trainer.commands``),
``--help``, ``--version``; a first word that is none of them nor an override is refused with the
nearest command. These quick paths import neither torch nor hydra (every package's ``__init__`` loads
its names on first use). Everything else is a training run (one per
seed of ``seed=a,b,...``), run by ``fastsac_trainer.training``: compose and validate the config,
create the run folder, print the placement, then run the synchronous or asynchronous trainer with
the console and the loggers (TensorBoard, W&B) as reporters. A user's mistake exits with code 2
and one line on stderr, never a traceback.

Stopping: SIGINT (Ctrl+C), SIGTERM, SIGHUP and ``algo.trainer.checkpoint_signal`` stop a run
cleanly (final checkpoint, exit 0); a second signal, or ``algo.trainer.stop_grace_s`` running out,
stops it at once (exit 128 + the signal number). A closed stdout or stderr only stops the console
drawing: the run goes on, and ``logs/trainer.log`` in the run folder keeps every line.

The rooms (modules of ``fastsac_trainer``): ``training`` (one run, and the runs of a seed list),
``arguments`` (help, flags refused, overrides composed into a run), ``launch`` (run folder, resume
checks, the trainer run with the console), ``outcome`` (the last line and the exit codes),
``evaluate`` and ``export`` (the subcommands), ``plot``, ``seeds`` (``seed=1,2,3``: its runs and
their names). This module only parses the arguments, dispatches and prints.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

from fastsac_trainer.outcome import EXIT_ABORTED, EXIT_USAGE

__all__ = ["command", "end_on_a_late_signal", "main"]

_log = logging.getLogger("trainer")


def main(argv: list[str] | None = None) -> None:
    """Run the trainer CLI on ``argv`` (None: ``sys.argv[1:]``) and exit with its status (``SystemExit``).

    For a call from Python: the caller's signal handling is its own once this returns (the command
    itself is :func:`command`).
    """
    raise SystemExit(_run(sys.argv[1:] if argv is None else list(argv)))


def command() -> None:
    """The ``trainer`` command: :func:`main` of the command line, then :func:`end_on_a_late_signal`.

    Its entry points (the ``trainer`` console script, ``apps/trainer/__main__.py``, ``python -m
    fastsac_trainer``) call this; nothing else does, so only the command's own process ends at once on
    a stop signal that comes after its outcome.
    """
    code = _run(sys.argv[1:])
    end_on_a_late_signal(code)
    raise SystemExit(code)


def _run(args: list[str]) -> int:
    """The command's exit status for ``args``; a user's mistake is one line on stderr (code 2)."""
    from fastsac_core import FastSACCoreError
    from fastsac_trainer.config.exceptions import TrainerAppError

    with _guarded_output():
        try:
            code = _dispatch(args)
        except (TrainerAppError, FastSACCoreError) as error:
            sys.stderr.write(f"error: {error}\n")
            code = EXIT_USAGE
        except KeyboardInterrupt:  # outside a run's own stop handling: before it started, or a command
            sys.stderr.write("aborted (Ctrl+C); nothing more was written (earlier checkpoints are intact)\n")
            code = EXIT_ABORTED
        sys.stdout.flush()
    return code


def end_on_a_late_signal(code: int) -> None:
    """From now on, a stop signal ends this process at once with ``code``, the outcome already printed.

    A run's own stop handling ends with its last line; the interpreter's exit after it (atexit handlers,
    the fork server's end) can take a moment, and a Ctrl+C then (a second one, pressed late) used to end
    the command with 130 and no word, though the run had finished and said so.
    """
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, lambda *_: os._exit(code))


@contextlib.contextmanager
def _guarded_output() -> Iterator[None]:
    """Wrap stdout and stderr in a :class:`~fastsac_trainer.console.GuardedStream`: closing stops no run."""
    from fastsac_trainer.console import GuardedStream

    def lost(what: str) -> None:
        from pathlib import Path

        from fastsac_async import RunLayout

        log = RunLayout(Path()).parent_log
        _log.warning("%s: the console stops drawing; the run goes on (its log: %s)", what, log)

    saved = sys.stdout, sys.stderr
    sys.stdout = GuardedStream(saved[0], "stdout", lost)
    sys.stderr = GuardedStream(saved[1], "stderr", lost)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def _dispatch(args: list[str]) -> int:
    from fastsac_trainer.arguments import help_text, overrides_only
    from fastsac_trainer.commands import COMMANDS, HELP_FLAGS, command_help, unknown_command

    first = args[0] if args else ""
    if first in (*HELP_FLAGS, "help"):
        topic = args[1] if first == "help" and len(args) > 1 else None
        if topic is not None and topic not in COMMANDS:
            raise unknown_command(topic)
        sys.stdout.write(help_text() if topic is None else command_help(topic))
        return 0
    if first in ("-V", "--version"):
        from importlib.metadata import version

        sys.stdout.write(f"trainer (fastsac-trainer) {version('fastsac-trainer')}\n")
        return 0
    if first in COMMANDS and any(a in HELP_FLAGS for a in args[1:]):
        sys.stdout.write(command_help(first))
        return 0
    if first and not first.startswith(("-", "+", "~")) and "=" not in first and first not in COMMANDS:
        raise unknown_command(first)  # a key=value override, a flag, or a command: nothing else starts a line
    if first == "eval":
        if "video=true" in (a.lower() for a in args[1:]):
            from fastsac_trainer.rendering import select_gl

            select_gl()  # before anything imports mujoco: it reads MUJOCO_GL once
        from fastsac_trainer.evaluate import eval_main

        return eval_main(args[1:])
    if first == "plot":
        from fastsac_trainer.plot import plot_main

        return plot_main(args[1:])
    if first == "export":
        from fastsac_trainer.export import export_main

        return export_main(args[1:])
    if any(a in HELP_FLAGS for a in args):
        sys.stdout.write(help_text())
        return 0
    from fastsac_trainer.loggers import quote_logger_list

    args = quote_logger_list(args)
    if "--cfg" in args:
        at = args.index("--cfg")
        what = args[at + 1] if at + 1 < len(args) else ""
        if what != "job":
            from fastsac_trainer.config.exceptions import TrainerAppError

            given = f"--cfg {what!r} is not supported" if what else "--cfg needs a value"
            raise TrainerAppError(f"{given}; use `--cfg job`")
        return _print_config(overrides_only(args[:at] + args[at + 2 :]))
    from fastsac_trainer.training import train_seeds

    return train_seeds(overrides_only(args))


def _print_config(overrides: list[str]) -> int:
    """The resolved config on stdout, checked as a launch checks it (placement, memory); notes on stderr."""
    from omegaconf import OmegaConf

    from fastsac_trainer.arguments import composed
    from fastsac_trainer.config.compose import explicit_keys
    from fastsac_trainer.config.placement import checked_placement

    resolved = composed(overrides)
    checked_placement(resolved.run, resolved.cuda_count, explicit_keys(overrides))
    for note in resolved.run.notes:  # what the config resolution changed, as a launch prints it
        sys.stderr.write(f"{note}\n")
    sys.stdout.write(OmegaConf.to_yaml(resolved.run.config))
    return 0
