"""Command line entry point of the trainer: ``uv run trainer [task=NAME] [key=value ...]``.

Subcommands are dispatched on the first argument before hydra sees anything: ``trainer eval ...``,
``trainer export ...``, ``trainer plot ...``, ``--help``. Everything else is a training run (one per
seed of ``seed=a,b,...``): compose and validate the config, create the run folder, print the
placement, then run the synchronous or asynchronous trainer with the console and the loggers
(TensorBoard, W&B) as reporters. A user's mistake exits with code 2 and
one line on stderr, never a traceback.

Stopping: SIGINT (Ctrl+C), SIGTERM, SIGHUP and ``algo.trainer.checkpoint_signal`` stop a run
cleanly (final checkpoint, exit 0); a second signal, or ``algo.trainer.stop_grace_s`` running out,
stops it at once (exit 128 + the signal number). A closed stdout or stderr only stops the console
drawing: the run goes on, and ``logs/trainer.log`` in the run folder keeps every line.

The rooms (modules of ``fastsac_trainer``): ``arguments`` (help, flags refused, overrides composed into
a run), ``launch`` (run folder, resume checks, the trainer run with the console), ``outcome`` (the last
line and the exit codes), ``evaluate`` and ``export`` (the subcommands), ``plot``, ``seeds``
(``seed=1,2,3``). This module only dispatches.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fastsac_trainer.outcome import EXIT_ABORTED, EXIT_USAGE

if TYPE_CHECKING:
    from fastsac_trainer.api import RunOutcome
    from fastsac_trainer.cluster import Cluster

__all__ = ["main", "train"]

_log = logging.getLogger("trainer")


def main(argv: list[str] | None = None) -> None:
    """Run the trainer CLI and exit with its status."""
    from fastsac_core import FastSACCoreError
    from fastsac_trainer.config.exceptions import TrainerAppError

    args = sys.argv[1:] if argv is None else list(argv)
    with _guarded_output():
        try:
            code = _dispatch(args)
        except (TrainerAppError, FastSACCoreError) as error:
            sys.stderr.write(f"error: {error}\n")
            code = EXIT_USAGE
        except KeyboardInterrupt:
            sys.stderr.write("aborted (Ctrl+C); the last saved checkpoint is intact\n")
            code = EXIT_ABORTED
        sys.stdout.flush()
    raise SystemExit(code)


@contextlib.contextmanager
def _guarded_output() -> Iterator[None]:
    """Wrap stdout and stderr in a :class:`~fastsac_trainer.console.GuardedStream`: closing stops no run."""
    from fastsac_trainer.console import GuardedStream

    def lost(what: str) -> None:
        from pathlib import Path

        from fastsac_async.run_layout import RunLayout

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
    from fastsac_trainer.loggers import quote_logger_list

    args = quote_logger_list(args)

    if args and args[0] in ("-h", "--help", "help"):
        sys.stdout.write(help_text())
        return 0
    if args and args[0] == "eval":
        if "video=true" in (a.lower() for a in args[1:]):
            from fastsac_trainer.rendering import select_gl

            select_gl()  # before anything imports mujoco: it reads MUJOCO_GL once
        from fastsac_trainer.evaluate import eval_main

        return eval_main(args[1:])
    if args and args[0] == "plot":
        from fastsac_trainer.plot import plot_main

        return plot_main(args[1:])
    if args and args[0] == "export":
        from fastsac_trainer.export import export_main

        return export_main(args[1:])
    if "--help" in args or "-h" in args:
        sys.stdout.write(help_text())
        return 0
    if "--cfg" in args:
        at = args.index("--cfg")
        what = args[at + 1] if at + 1 < len(args) else ""
        if what != "job":
            from fastsac_trainer.config.exceptions import TrainerAppError

            raise TrainerAppError(f"--cfg {what!r} is not supported; use `--cfg job`")
        return _print_config(overrides_only(args[:at] + args[at + 2 :]))
    from fastsac_trainer.seeds import train_seeds

    return train_seeds(overrides_only(args))


def _print_config(overrides: list[str]) -> int:
    from omegaconf import OmegaConf

    from fastsac_trainer.arguments import composed

    run = composed(overrides).run
    sys.stdout.write(OmegaConf.to_yaml(run.config))
    return 0


def train(overrides: list[str], outcome: RunOutcome | None = None) -> int:
    """One training run from command-line overrides; returns the exit code (``outcome`` gets the rest).

    Under torchrun on several hosts, this host's part of one run (``fastsac_trainer.cluster``).
    """
    from fastsac_trainer.cluster import join_cluster

    with join_cluster() as cluster:
        return _train(overrides, outcome, cluster)


def _train(overrides: list[str], outcome: RunOutcome | None, cluster: Cluster | None) -> int:
    import functools

    from omegaconf import OmegaConf

    from fastsac_async.run_layout import RunLayout
    from fastsac_trainer.arguments import composed
    from fastsac_trainer.config.placement import describe_placement, resolve_placement
    from fastsac_trainer.launch import check_resumable, open_run_dir, run_with_console, select_trainer

    run, resume_from, previous_run, cuda_count, settings = composed(overrides)
    every = run.config["algo"]["trainer"]["eval_video_every"]
    rendering = None
    if every and run.evaluation is not None:
        from fastsac_trainer.rendering import select_gl

        # Before the evaluator is spawned (it inherits MUJOCO_GL) and before the sync trainer renders.
        backend = select_gl(f"algo.trainer.eval_video_every={every}", "set algo.trainer.eval_video_every=0")
        rendering = f"clips of evaluations: every {every}, rendered with MUJOCO_GL={backend}"
    budget = run.config["algo"]["trainer"]["num_learning_iterations"]
    resumed_at = None if resume_from is None else check_resumable(resume_from, run)
    if resumed_at is not None and resumed_at >= budget:
        sys.stdout.write(
            f"nothing to train: {resume_from} is at iteration {resumed_at} and "
            f"algo.trainer.num_learning_iterations={budget}; raise it to train on\n"
        )
        if outcome is not None and resume_from is not None:
            outcome.nothing_to_train(previous_run or resume_from.parent, resume_from)
        return 0
    topology = resolve_placement(run, run.dims, cuda_count) if run.asynchronous else None
    placement = describe_placement(run, topology)
    if cluster is not None:  # every host agrees before anything starts
        placement = f"{placement}\n{cluster.agree(run, topology, resumed_at)}"
    trainer_fn = select_trainer(run.asynchronous)
    cfg = run.config
    config_yaml = OmegaConf.to_yaml(cfg)
    if cluster is None:
        run_dir = open_run_dir(run, resume_from, previous_run, config_yaml)
    else:
        make = functools.partial(open_run_dir, run, resume_from, previous_run, config_yaml)
        run_dir = cluster.run_folder(make, config_yaml, resuming=resume_from is not None)
    RunLayout(run_dir).overrides.write_text("".join(f"{o}\n" for o in settings), encoding="utf-8")
    plan = run.plan(run_dir, resume_from, topology, None if cluster is None else cluster.group)
    if cluster is not None:
        cluster.start_watch()
        trainer_fn = cluster.guard(trainer_fn)
    out = sys.stdout
    for note in run.notes:
        out.write(f"{note}\n")
    out.write(f"{placement}\n")
    if rendering is not None:
        out.write(f"{rendering}\n")
    out.write(f"run folder: {run_dir}\n")
    if resume_from is not None:
        out.write(f"resuming from {resume_from}\n")
    out.flush()
    return run_with_console(plan, cfg["console"], trainer_fn, resumed_at, outcome)
