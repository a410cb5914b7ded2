"""Training runs, from their overrides to their exit code: what the CLI and the Python API run.

:func:`train_run` is one run: join the hosts (under torchrun), compose and validate the config,
check a resume, resolve the placement, check that its memory fits the host, claim the run folder, print
what the run will do, then run the synchronous or asynchronous trainer with the console
(``fastsac_trainer.launch``).
:func:`train_seeds` trains the runs of a seed list (``seed=1,2,3``, ``fastsac_trainer.seeds``) one after
another. A :class:`RunOutcome` passed to :func:`train_run` records how the run ended, for the Python API
(``fastsac_trainer.api.train``).

The command line (``fastsac_trainer.cli``) parses its arguments and calls :func:`train_seeds`; the Python
API calls :func:`train_run`; nothing here imports either of them.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastsac_trainer.tensorboard import eval_scalars

if TYPE_CHECKING:
    from fastsac_async import PrestartedWorkers
    from fastsac_trainer.cluster import Cluster
    from fastsac_trainer.parent_log import ParentLog

__all__ = [
    "PRELOAD_DYNAMO_ENV",
    "RunOutcome",
    "end_start",
    "server_preloads_dynamo",
    "start_workers_first",
    "train_run",
    "train_seeds",
]


@dataclass
class RunOutcome:
    """How one run ended, for its caller: a reporter of the last metrics, then the end."""

    metrics: dict[str, float] = field(default_factory=dict)
    """Scalars of the last snapshot."""
    checkpoint: Path | None = None
    """Latest checkpoint notice."""
    run_dir: Path | None = None
    """The run folder, once the run ended."""
    result: Any = None
    """The trainer's result (``SyncResult`` or ``AsyncResult``); None when it did not return."""
    signal: str | None = None
    """Name of the stop signal, if one stopped the run."""
    failure: str | None = None
    """One line about the failed worker."""
    aborted: bool = False
    """Stopped at once."""
    nothing: bool = False
    """A resume found nothing to train."""

    def report(self, snapshot: Any) -> None:
        """Keep the snapshot's scalars (a :class:`~fastsac_trainer.reporting.Reporter`)."""
        self.metrics = dict(snapshot.scalars)
        if snapshot.last_eval is not None:  # the latest evaluation, under its TensorBoard names
            self.metrics.update(eval_scalars(snapshot.last_eval))

    def evaluated(self, point: Any) -> None:
        """Keep the evaluation's scalars (it may come after the last snapshot)."""
        self.metrics.update(eval_scalars(point))

    def checkpoint_saved(self, path: Path) -> None:
        """Keep the checkpoint's path."""
        self.checkpoint = path

    def close(self) -> None:
        """Nothing to release."""

    def ended(self, run_dir: Path, result: object, signal: str | None, failure: Any, aborted: bool) -> None:
        """The run in ``run_dir`` ended with ``result``, ``failure`` (the console's) or ``aborted``."""
        self.run_dir, self.result, self.signal, self.aborted = run_dir, result, signal, aborted
        self.failure = None if failure is None else failure.line()

    def nothing_to_train(self, run_dir: Path, checkpoint: Path) -> None:
        """A resume of ``checkpoint`` was already at its budget."""
        self.run_dir, self.checkpoint, self.nothing = run_dir, checkpoint, True


def train_seeds(overrides: list[str]) -> int:
    """Train the runs of ``seed=a,b,...`` in turn; the first non-zero exit code ends the list.

    One override list per seed, named by :func:`~fastsac_trainer.seeds.seed_runs`; a single seed is one run.
    """
    server = start_workers_first()
    try:
        from fastsac_trainer.boot_clock import next_launch
        from fastsac_trainer.seeds import seed_runs

        runs = seed_runs(overrides)
        for i, run in enumerate(runs):
            if i:  # its start-up counts from its own start, not from the first run's launch
                next_launch()
            if len(runs) > 1:
                sys.stdout.write(f"seed {i + 1}/{len(runs)}: {run[-2]} -> {run[-1].partition('=')[2]}\n")
                sys.stdout.flush()
            code = train_run(run, server=server)
            if code != 0:
                return code
        return 0
    finally:
        end_start(server)  # a refused list, or runs that never handed it over (synchronous, refused)


def train_run(
    overrides: list[str], outcome: RunOutcome | None = None, *, server: PrestartedWorkers | None = None
) -> int:
    """One training run from command-line overrides; returns the exit code (``outcome`` gets the rest).

    Under torchrun on several hosts, this host's part of one run (``fastsac_trainer.cluster``).
    ``server``: the workers' fork server its caller started, and cancels (None: started and cancelled
    here).
    """
    owned = server is None
    if server is None:
        server = start_workers_first()
    try:
        from fastsac_trainer.cluster import join_cluster

        with join_cluster() as cluster:
            return _prepared_run(overrides, outcome, cluster, server)
    finally:
        if owned:
            end_start(server)  # no asynchronous run was handed it: refused, synchronous, nothing to train


def start_workers_first() -> PrestartedWorkers:
    """Start the workers' fork server; a run's caller does this first, before anything imports torch.

    The server imports torch and the workers' modules while this process imports its own and composes
    and prepares the run (the env's spaces, the placement: seconds too); most runs are asynchronous
    (Note [fork server] in ``fastsac_async.parent.fork_server``). The caller hands the result to
    :func:`train_run` and cancels it when the runs are over.
    """
    from fastsac_async import prestart_workers  # imports no torch
    from fastsac_trainer.boot_clock import profile_launch
    from fastsac_trainer.rendering import mujoco_import_is_fork_safe

    dynamo = server_preloads_dynamo()  # a bad FASTSAC_PRELOAD_DYNAMO is refused before anything starts
    profile_launch()  # FASTSAC_PROFILE_BOOT: the start-up under cProfile from here (the clock writes it)
    # Every worker unpickles its run's env factory, and so imports the tasks (MuJoCo, gymnasium): once,
    # in the server, instead of in each worker after its fork; unless MuJoCo's import would load an
    # OpenGL library there (MUJOCO_GL=egl, say), which no process should hold before it forks.
    tasks = ("fastsac_trainer.tasks._factory",) if mujoco_import_is_fork_safe() else ()
    return prestart_workers(preload=tasks, preload_learner=dynamo)


PRELOAD_DYNAMO_ENV = "FASTSAC_PRELOAD_DYNAMO"
"""Set to 0, the fork server leaves ``torch._dynamo`` to each learner (:func:`server_preloads_dynamo`)."""


def server_preloads_dynamo(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the trainer's fork server imports ``torch._dynamo`` for its learners (``LEARNER_PRELOAD``).

    It does, unless ``FASTSAC_PRELOAD_DYNAMO=0``. The first fork then waits for that import, and every
    learner starts with it done: on the GPU host, with collectors that infer on their CPUs (the default
    there) and are ready in half a second, the first update came 0.7 s sooner with it (6.5 s against 7.2
    s after launch, wiki/benchmarks.md); so it did on a host without a GPU. Collectors that infer on the
    GPU each spend seconds on a CUDA context, time in which a learner imports it itself: there ``0``
    gave the first update 0.6 s sooner (7.5 s against 8.1 s).

    Raises:
        ConfigError: ``FASTSAC_PRELOAD_DYNAMO`` is set to anything but 0, 1 or nothing.
    """
    env = os.environ if environ is None else environ
    value = env.get(PRELOAD_DYNAMO_ENV, "")
    if value not in ("", "0", "1"):
        from fastsac_trainer.config.exceptions import ConfigError

        fix = "unset it, or use 1 (the fork server imports dynamo, the default) or 0 (each learner does)"
        raise ConfigError(PRELOAD_DYNAMO_ENV, value, fix)
    return value != "0"


def end_start(server: PrestartedWorkers) -> None:
    """What :func:`start_workers_first` began and no run took: the fork server, a start-up profile."""
    from fastsac_trainer.boot_clock import stop_profile

    server.cancel()
    stop_profile()


def _prepared_run(
    overrides: list[str], outcome: RunOutcome | None, cluster: Cluster | None, server: PrestartedWorkers
) -> int:
    from fastsac_trainer.parent_log import ParentLog

    with ParentLog() as log:  # from here on (Note [the parent's log tells the whole story])
        logging.getLogger("trainer").info("launch: trainer %s", " ".join(overrides))
        return _launch(overrides, outcome, cluster, server, log)


def _launch(
    overrides: list[str],
    outcome: RunOutcome | None,
    cluster: Cluster | None,
    server: PrestartedWorkers,
    log: ParentLog,
) -> int:
    import functools

    from omegaconf import OmegaConf

    from fastsac_async import RunLayout
    from fastsac_trainer.arguments import composed, one_launch_settings
    from fastsac_trainer.config.compose import explicit_keys
    from fastsac_trainer.config.placement import checked_placement, describe_placement
    from fastsac_trainer.launch import (
        check_replay_fits,
        check_resumable,
        open_run_dir,
        resume_line,
        run_with_console,
        select_trainer,
    )
    from fastsac_trainer.run_dir import release_run_dir

    run, resume_from, previous_run, cuda_count, settings = composed(overrides)
    if not run.asynchronous:
        server.cancel()
    every = run.config["algo"]["trainer"]["eval_video_every"]
    rendering = None
    if every and run.evaluation is not None:
        from fastsac_trainer.rendering import select_gl
        from fastsac_trainer.video import mp4_unavailable

        # Before the evaluator is spawned (it inherits MUJOCO_GL) and before the sync trainer renders.
        backend = select_gl(f"algo.trainer.eval_video_every={every}", "set algo.trainer.eval_video_every=0")
        rendering = f"clips of evaluations: every {every}, rendered with MUJOCO_GL={backend}"
        if (no_mp4 := mp4_unavailable()) is not None:
            rendering += f"; GIF only ({no_mp4})"
    budget = run.config["algo"]["trainer"]["num_learning_iterations"]
    hosts = None if cluster is None else cluster.group
    resumed_at = None if resume_from is None else check_resumable(resume_from, run, hosts)
    if resumed_at is not None and resumed_at >= budget:
        sys.stdout.write(
            f"nothing to train: {resume_from} is at iteration {resumed_at} and "
            f"algo.trainer.num_learning_iterations={budget}; raise it to train on\n"
        )
        if outcome is not None and resume_from is not None:
            outcome.nothing_to_train(previous_run or resume_from.parent, resume_from)
        return 0
    topology = checked_placement(run, cuda_count, explicit_keys(overrides))
    if resume_from is not None:  # its replay, read where the resume reads it (any run folder will do)
        check_replay_fits(run.plan(resume_from.parent, resume_from, topology, cluster and cluster.group))
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
    try:  # the run folder is this process's until the run ends (Note [run folder lock])
        log.open(run_dir)
        RunLayout(run_dir).overrides.write_text("".join(f"{o}\n" for o in settings), encoding="utf-8")
        plan = run.plan(run_dir, resume_from, topology, None if cluster is None else cluster.group)
        if cluster is not None:
            cluster.start_watch()
            trainer_fn = cluster.guard(trainer_fn)
        for note in run.notes:
            log.say(note)
        log.say(placement)
        if rendering is not None:
            log.say(rendering)
        log.say(f"run folder: {run_dir}")
        if resume_from is not None and resumed_at is not None:
            log.say(resume_line(plan, resumed_at, one_launch_settings(overrides)))
        server.hand_over()
        return run_with_console(plan, cfg["console"], trainer_fn, log, resumed_at, outcome)
    finally:
        release_run_dir(run_dir)
