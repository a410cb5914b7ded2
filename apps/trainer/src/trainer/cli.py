"""Command line entry point of the trainer: ``uv run trainer [task=NAME] [key=value ...]``.

Subcommands are dispatched on the first argument before hydra sees anything: ``trainer eval ...``,
``trainer export ...``, ``--help``. Everything else is a training run: compose and validate the
config, create the run folder, print the placement, then run the synchronous or asynchronous
trainer with the console and TensorBoard as reporters. A user's mistake exits with code 2 and
one line on stderr, never a traceback.

Stopping: SIGINT (Ctrl+C), SIGTERM, SIGHUP and ``algo.trainer.checkpoint_signal`` stop a run
cleanly (final checkpoint, exit 0); a second signal, or ``algo.trainer.stop_grace_s`` running out,
stops it at once (exit 128 + the signal number). A closed stdout or stderr only stops the console
drawing: the run goes on, and ``logs/trainer.log`` in the run folder keeps every line.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from trainer.api import RunOutcome

__all__ = ["main", "select_trainer", "train"]

_log = logging.getLogger("trainer")

EXIT_USAGE = 2
"""Exit code of an invalid command line or config."""
EXIT_FAILED = 1
"""Exit code of a run whose worker failed."""
EXIT_ABORTED = 130
"""Exit code after a second Ctrl+C (a run stopped at once exits with 128 + the signal number)."""

_OVERRIDES_FILE = "overrides.txt"
PARENT_LOG = "trainer.log"
"""The parent's log in ``runs/<run>/logs/``: its log records and every console line."""


def _help() -> str:
    from trainer.config.store import DEFAULT_TASK
    from trainer.tasks import GYM_TASK, TASKS

    marks = {DEFAULT_TASK: " (default)"}
    tasks = "\n".join(
        f"  {spec.name:<12} {spec.description} [{spec.num_envs} envs]{marks.get(spec.name, '')}"
        for spec in (*TASKS.values(), GYM_TASK)
    )
    return f"""usage: trainer [task=NAME] [key=value ...]        train (hydra overrides)
       trainer --cfg job [key=value ...]           print the resolved config and exit
       trainer eval checkpoint=PATH [episodes=N]   run the deterministic policy, print the mean return
       trainer export checkpoint=PATH [format=onnx] [out=FILE]   write the policy for deployment

Asynchronous FastSAC: collector processes step MuJoCo envs on CPUs while learner processes
update on GPUs (or the CPU). Runs go to runs/<run>/ (config.yaml, logs/, async_errors/,
checkpoints/, TensorBoard events).

tasks (task=NAME):
{tasks}

important options:
  algo.trainer.asynchronous=true|false             async collectors+learners, or the one-process loop
  algo.trainer.device=auto|cpu|cuda|cuda:N         learner device (auto: cuda when available)
  algo.trainer.num_learning_iterations=N           budget in iterations of task.num_envs transitions
  algo.trainer.time_limit_s=S                      stop after S seconds of training (final checkpoint)
  algo.trainer.logging_interval=N / save_interval=N
  algo.trainer.async_options.num_collectors=N|auto collector processes (task.num_envs % N == 0);
                                                   auto (default): one per CPU the learners leave
  algo.trainer.async_options.num_learners=N        learner processes, one per GPU (DDP)
  algo.trainer.async_options.learner_devices=[cuda:0,cuda:1]
  algo.trainer.async_options.cpus_per_collector=N|auto|null  pin each collector to N CPUs of its
                                                   NUMA node (auto: its share; null: unpinned)
  algo.trainer.async_options.ring_capacity=N       slots per collector ring
  algo.trainer.async_options.utd_mode=strict|learner_bound
  algo.trainer.async_options.ingest=ragged|generations
  algo.trainer.async_options.collector_inference_device=auto|cpu|cuda[:N]
  algo.trainer.async_options.transition_ipc=auto|on|off / weight_ipc=auto|on|off
  algo.agent.KEY=VALUE                             FastSAC hyper-parameters (batch_size, num_updates, ...)
  task.num_envs=N  seed=N  run_name=NAME  runs_root=DIR  console=auto|rich|plain
  task=gym task.env_id=ID [task.env_kwargs={{k:v}}] [task.env_import=MODULE]   your gymnasium env
  task=gym task.env_factory=package.module:function   your own batched env (wiki/tasks.md)
  resume=RUN_FOLDER|CHECKPOINT                     continue a run (steps, optimizers, normalizers)

stopping:
  Ctrl+C, SIGTERM, SIGHUP: stop with a final checkpoint (exit 0); a second one stops at once
  algo.trainer.stop_grace_s=S                      a clean stop gets S seconds, then stops at once (5)
  algo.trainer.checkpoint_signal=SIGUSR1|SIGUSR2|null  also stops with a checkpoint (SLURM --signal)

Keys 1/2/3 switch console tabs.
`trainer --cfg job` lists every key with its value.  Guide: wiki/trainer.md
"""


def main(argv: list[str] | None = None) -> None:
    """Run the trainer CLI and exit with its status."""
    from fastsac_core import FastSACCoreError
    from trainer.config.exceptions import TrainerAppError

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
    """Wrap stdout and stderr in :class:`~trainer.console.GuardedStream`: a closed one stops no run."""
    from trainer.console import GuardedStream

    def lost(what: str) -> None:
        _log.warning("%s: the console stops drawing; the run goes on (its log: logs/%s)", what, PARENT_LOG)

    saved = sys.stdout, sys.stderr
    sys.stdout = GuardedStream(saved[0], "stdout", lost)
    sys.stderr = GuardedStream(saved[1], "stderr", lost)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def _dispatch(args: list[str]) -> int:
    if args and args[0] in ("-h", "--help", "help"):
        sys.stdout.write(_help())
        return 0
    if args and args[0] == "eval":
        from trainer.evaluate import eval_main

        return eval_main(args[1:])
    if args and args[0] == "export":
        from trainer.export import export_main

        return export_main(args[1:])
    if "--help" in args or "-h" in args:
        sys.stdout.write(_help())
        return 0
    if "--cfg" in args:
        at = args.index("--cfg")
        what = args[at + 1] if at + 1 < len(args) else ""
        if what != "job":
            from trainer.config.exceptions import TrainerAppError

            raise TrainerAppError(f"--cfg {what!r} is not supported; use `--cfg job`")
        return _print_config(_overrides_only(args[:at] + args[at + 2 :]))
    return train(_overrides_only(args))


_MULTIRUN = ("--multirun", "-m")


def _overrides_only(args: list[str]) -> list[str]:
    """``args``, once none of them is a flag (hydra's ``--multirun``, ``--config-name``...).

    Raises:
        TrainerAppError: An argument is a flag; the message says what to do instead.
    """
    from trainer.config.exceptions import TrainerAppError

    for arg in args:
        if arg in _MULTIRUN:
            raise TrainerAppError(
                f"{arg} is not supported: the trainer runs one configuration per command; start one "
                "command per setting, e.g. `for s in 1 2; do trainer seed=$s; done`"
            )
        if arg.startswith("-"):
            raise TrainerAppError(
                f"{arg.partition('=')[0]} is not an option: the trainer takes key=value overrides only; "
                "see `trainer --help`"
            )
    return args


class _Composed(NamedTuple):
    """A command line composed into a run, with what a resume brings."""

    run: Any
    """The resolved run (``trainer.config.resolve.ResolvedRun``)."""
    resume_from: Path | None
    """Checkpoint to resume from."""
    previous_run: Path | None
    """Run folder of that checkpoint (None for a loose checkpoint file)."""
    cuda_count: int
    """CUDA devices visible."""
    settings: list[str]
    """The run's overrides to save in ``overrides.txt``: merged, one per key, without resume=/run_name=."""


_NOT_SAVED = ("resume=", "run_name=")
"""Overrides that name where a run goes, not what it is: a resume must not inherit them."""


def _composed(overrides: list[str]) -> _Composed:
    """The run ``overrides`` compose into; a resume starts from its run's saved overrides."""
    import torch
    from omegaconf import OmegaConf

    from trainer.config.compose import compose_config, explicit_keys, merge_overrides
    from trainer.config.resolve import resolve_run
    from trainer.run_dir import resolve_resume

    composed = compose_config(overrides)
    resume_from = previous_run = None
    if composed.resume:
        resume_from, previous_run = resolve_resume(str(composed.resume))
        saved = None if previous_run is None else previous_run / _OVERRIDES_FILE
        if saved is not None and saved.is_file():
            # The resumed run starts from the run's saved (merged) overrides; new ones win.
            lines = saved.read_text(encoding="utf-8").splitlines()
            kept = [o for o in lines if o and not o.startswith(_NOT_SAVED)]
            overrides = merge_overrides(kept, overrides)
            composed = compose_config(overrides)
    cfg: dict[str, Any] = OmegaConf.to_container(composed, resolve=True)  # type: ignore[assignment]
    composed_envs = cfg["task"]["num_envs"]
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    run = resolve_run(cfg, explicit=explicit_keys(overrides), cuda_count=cuda_count)
    settings = [o for o in merge_overrides(overrides) if not o.startswith(_NOT_SAVED)]
    if run.config["task"]["num_envs"] != composed_envs:
        # Sizing to this machine (or the CPU profile) moved it: a resume elsewhere keeps the replay's count.
        settings = merge_overrides(settings, [f"task.num_envs={run.config['task']['num_envs']}"])
    return _Composed(run, resume_from, previous_run, cuda_count, settings)


def _print_config(overrides: list[str]) -> int:
    from omegaconf import OmegaConf

    run = _composed(overrides).run
    sys.stdout.write(OmegaConf.to_yaml(run.config))
    return 0


def train(overrides: list[str], outcome: RunOutcome | None = None) -> int:
    """One training run from command-line overrides; returns the exit code (``outcome`` gets the rest)."""
    from omegaconf import OmegaConf

    from trainer.config.placement import describe_placement, placement_of

    run, resume_from, previous_run, cuda_count, settings = _composed(overrides)
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
    topology = placement_of(run, cuda_count)
    placement = describe_placement(run, topology)
    trainer_fn = select_trainer(run.config["algo"]["trainer"]["asynchronous"])
    cfg = run.config
    run_dir = _open_run_dir(run, resume_from, previous_run, OmegaConf.to_yaml(cfg))
    (run_dir / _OVERRIDES_FILE).write_text("".join(f"{o}\n" for o in settings), encoding="utf-8")
    plan = run.plan(run_dir, resume_from, topology)
    out = sys.stdout
    for note in run.notes:
        out.write(f"{note}\n")
    out.write(f"{placement}\n")
    out.write(f"run folder: {run_dir}\n")
    if resume_from is not None:
        out.write(f"resuming from {resume_from}\n")
    out.flush()
    return _run_with_console(plan, cfg["console"], trainer_fn, resumed_at, outcome)


def _open_run_dir(run: Any, resume_from: Path | None, previous_run: Path | None, config_yaml: str) -> Path:
    """The run folder: the one ``run_name`` names, else a resume's own, else a new ``<task>-<time>``.

    Raises:
        TrainerAppError: A new run would write into a folder that holds something, or a resume
            into its own folder would overwrite later checkpoints.
    """
    from trainer.run_dir import create_default_run_dir, create_run_dir

    runs_root, name = Path(run.config["runs_root"]), run.config["run_name"]
    if name is not None:
        run_dir = runs_root / name
    elif previous_run is not None:
        run_dir = previous_run
    else:
        return create_default_run_dir(runs_root, run.task_name, config_yaml)
    same_run = previous_run is not None and run_dir.resolve() == previous_run.resolve()
    if same_run and resume_from is not None:
        _refuse_overwriting_later_checkpoints(resume_from, run_dir)
    return create_run_dir(run_dir.parent, run_dir.name, config_yaml, resuming=same_run)


def _refuse_overwriting_later_checkpoints(checkpoint: Path, run_dir: Path) -> None:
    """Resuming an older checkpoint into its own run folder would mix two histories: refuse it.

    Raises:
        TrainerAppError: ``checkpoint`` is not the folder's latest one.
    """
    from trainer.config.exceptions import TrainerAppError
    from trainer.run_dir import latest_checkpoint

    latest = latest_checkpoint(run_dir)
    if latest is not None and latest.resolve() != checkpoint.resolve():
        raise TrainerAppError(
            f"resume={checkpoint} is not the latest checkpoint of {run_dir} ({latest.name} is); resuming "
            "into the same folder would overwrite the later ones: add run_name=<new name> to branch off"
        )


_SHAPED = (
    "actor_hidden_dim",
    "critic_hidden_dim",
    "num_q_networks",
    "num_atoms",
    "use_layer_norm",
    "buffer_size",
)
"""Agent settings that shape a checkpoint's tensors: a resume must keep them."""


def check_resumable(checkpoint: Path, run: Any) -> int:
    """The checkpoint's iteration, once its task, network and replay sizes fit ``run``.

    Checked before anything is written or started, so a mismatch is one line naming the setting,
    instead of a learner failing at start-up.

    Raises:
        TrainerAppError: The checkpoint was trained with a different task, network or env count.
    """
    import dataclasses

    from fastsac_core import peek_checkpoint
    from trainer.config.exceptions import TrainerAppError

    info = peek_checkpoint(checkpoint)
    saved_dims, dims = info["dims"], dataclasses.asdict(run.dims)
    if saved_dims != dims:
        differ = ", ".join(
            f"{k} {saved_dims.get(k)} -> {v}" for k, v in dims.items() if saved_dims.get(k) != v
        )
        raise TrainerAppError(
            f"task={run.task_name} does not match {checkpoint} (observation/action sizes {differ}); "
            "resume with the task it was trained on"
        )
    agent = dataclasses.asdict(run.agent)
    for key in _SHAPED:
        saved = info["config"].get(key)
        if saved != agent[key]:
            raise TrainerAppError(
                f"algo.agent.{key}={agent[key]} does not match {checkpoint}, which has {saved}; "
                f"resume with algo.agent.{key}={saved} or start a new run (run_name=...)"
            )
    asynchronous = run.config["algo"]["trainer"]["asynchronous"]
    learners = run.async_options.num_learners if asynchronous else 1
    num_envs = run.config["task"]["num_envs"]
    per_learner, saved_envs = num_envs // learners, info["buffer"]["num_envs"]
    if per_learner != saved_envs:
        raise TrainerAppError(
            f"task.num_envs={num_envs} over {learners} learner(s) gives {per_learner} envs per learner, "
            f"but {checkpoint} was trained with {saved_envs}; resume with the same task.num_envs and "
            "algo.trainer.async_options.num_learners"
        )
    return int(info["extra"].get("iteration", 0))


def _run_with_console(
    plan: Any,
    console_mode: str,
    trainer_fn: Callable[..., object],
    resumed_at: int | None = None,
    outcome: RunOutcome | None = None,
) -> int:
    from trainer.console import open_console

    title = f"{plan.task_name}/fastsac"
    with _parent_log(plan.run_dir, title) as logged:
        console = open_console(console_mode, title=title)
        return _run_logged(plan, console, logged, trainer_fn, resumed_at, outcome)


@contextlib.contextmanager
def _parent_log(run_dir: Path, title: str) -> Iterator[Any]:
    """Open ``logs/trainer.log`` for every parent log record (INFO and up) and every console line.

    Yields the ``PlainConsole`` writing console lines there: the log keeps all of it, even once
    stdout is gone.
    """
    from trainer.console import PlainConsole

    root = logging.getLogger()
    previous_level = root.level
    with (run_dir / "logs" / PARENT_LOG).open("a", encoding="utf-8", buffering=1) as log_file:
        handler = logging.StreamHandler(log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            yield PlainConsole(log_file, title, min_interval_s=0.0)
        finally:
            root.removeHandler(handler)
            root.setLevel(previous_level)


def _run_logged(
    plan: Any,
    console: Any,
    logged: Any,
    trainer_fn: Callable[..., object],
    resumed_at: int | None,
    outcome: RunOutcome | None = None,
) -> int:
    """Run the trainer with ``console`` and the parent log ``logged``; the run's exit code."""
    import signal

    from trainer.console import STOP_SIGNALS, ConsoleLogHandler, FanOut, StopRequest
    from trainer.run_dir import latest_checkpoint
    from trainer.tensorboard import TensorBoardReporter

    handler = ConsoleLogHandler(console)
    root = logging.getLogger()
    tensorboard = TensorBoardReporter(plan.run_dir, resumed_at=resumed_at)
    extra = () if plan.checkpoint_signal is None else (signal.Signals[plan.checkpoint_signal],)

    def stop_requested(reason: str) -> None:
        console.stop_requested(reason)
        logged.stop_requested(reason)

    # The async engine polls `aborted` (its shutdown must not be cut short by an exception); the
    # sync trainer is one process, where the abort is a KeyboardInterrupt wherever it is.
    stop = StopRequest(
        on_first=stop_requested,
        signals=(*STOP_SIGNALS, *extra),
        grace_s=plan.stop_grace_s,
        raise_on_abort=not plan.asynchronous,
    )
    result: object = None
    aborted = False  # the trainer did not return: stopped at once (a trainer that returned is done)
    try:
        with console, stop:
            root.addHandler(handler)
            result = trainer_fn(
                plan,
                FanOut([console, logged, tensorboard, *([outcome] if outcome is not None else [])]),
                should_stop=stop,
                boot_view=console,
                should_abort=lambda: stop.aborted,
            )
    except BaseException as error:
        if stop.aborted:
            aborted = True
            _log.debug("stopped at once", exc_info=error)
        elif isinstance(error, Exception) and console.failure is not None:
            _log.debug("boot failed", exc_info=error)
        else:
            raise
    finally:
        root.removeHandler(handler)
        tensorboard.close()
    if outcome is not None:
        outcome.ended(plan.run_dir, result, stop.reason, console.failure, aborted)
    if aborted:
        latest = latest_checkpoint(plan.run_dir)
        return _final_line(
            f"stopped at once ({stop.abort_cause}): no final checkpoint, the last one is "
            f"{latest or 'none'}; run folder {plan.run_dir}",
            sys.stderr,
            128 + (stop.abort_signal or signal.SIGINT),
        )
    if console.failure is not None:
        return _final_line(f"error: {console.failure.line()}", sys.stderr, EXIT_FAILED)
    return _final_line(f"done: {_summary(result, stop.reason)}; run folder {plan.run_dir}", sys.stdout, 0)


def _final_line(line: str, stream: Any, code: int) -> int:
    """Write the run's last line to ``stream`` and to the parent's log; return ``code``."""
    stream.write(f"{line}\n")
    stream.flush()
    _log.log(logging.INFO if code == 0 else logging.WARNING, "%s (exit %d)", line, code)
    return code


def _summary(result: object, stop: str | None = None) -> str:
    """A short line about the trainer's result, whatever shape it has; ``stop`` names the signal."""
    if result is None:
        return "training finished"
    fields = getattr(result, "__dataclass_fields__", None)
    if fields:
        values = {name: getattr(result, name) for name in fields if not name.startswith("_")}
        if stop is not None and values.get("stop_reason") == "stop_requested":
            values["stop_reason"] = stop
        elif stop is not None and values.get("stop_reason") == "stopped_during_boot":
            values["stop_reason"] = f"stopped_during_boot ({stop})"
        return ", ".join(f"{name}={value}" for name, value in list(values.items())[:6])
    return str(result)


def select_trainer(asynchronous: bool) -> Callable[..., object]:
    """The trainer entry point: ``fn(plan, reporter, should_stop=..., boot_view=..., should_abort=...)``.

    The synchronous trainer is ``trainer.sync_trainer.run_sync(plan, reporter, should_stop=...)``
    (it takes no boot view, and is aborted by an exception, not by polling); the asynchronous one
    is ``trainer.async_trainer.run_async(plan, reporter, should_stop=..., boot_view=...,
    should_abort=...)``, imported lazily so the sync path never imports the async engine.

    Raises:
        TrainerAppError: The asynchronous trainer is not part of this build.
    """
    from trainer.config.exceptions import TrainerAppError

    if not asynchronous:
        from trainer.sync_trainer import run_sync

        def sync(
            plan: Any,
            reporter: Any,
            *,
            should_stop: Callable[[], bool],
            boot_view: Any,
            should_abort: Callable[[], bool] | None = None,
        ) -> object:
            # No polling for an abort: in one process it is a KeyboardInterrupt (StopRequest).
            return run_sync(plan, reporter, should_stop=should_stop)

        return sync
    try:
        from trainer.async_trainer import run_async  # type: ignore[import-not-found, unused-ignore]
    except ModuleNotFoundError as error:
        if error.name != "trainer.async_trainer":
            raise
        raise TrainerAppError(
            "algo.trainer.asynchronous=True is invalid: the asynchronous trainer is not in this build; "
            "use algo.trainer.asynchronous=false"
        ) from None
    return run_async  # type: ignore[no-any-return, unused-ignore]
