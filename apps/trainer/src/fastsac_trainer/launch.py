"""Launching a training run: its folder, the resume checks, the trainer, the console around it.

Everything here runs after the config is valid (``fastsac_trainer.arguments.composed``): the checks that
need the checkpoint (:func:`check_resumable`), the run folder (:func:`open_run_dir`), and the run
itself with the console, the parent's log and the metric loggers (``logger=``) as reporters
(:func:`run_with_console`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastsac_trainer.outcome import EXIT_FAILED, final_line, summary

if TYPE_CHECKING:
    from fastsac_async import HostGroup
    from fastsac_trainer.parent_log import ParentLog
    from fastsac_trainer.training import RunOutcome

__all__ = ["check_resumable", "open_run_dir", "resume_line", "run_with_console", "select_trainer"]

_log = logging.getLogger("trainer")


def open_run_dir(run: Any, resume_from: Path | None, previous_run: Path | None, config_yaml: str) -> Path:
    """The run folder: the one ``run_name`` names, else a resume's own, else a new ``<task>-<time>``.

    Raises:
        TrainerAppError: A new run would write into a folder that holds something, or a resume
            into its own folder would overwrite later checkpoints.
    """
    from fastsac_trainer.run_dir import create_default_run_dir, create_run_dir

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
    from fastsac_trainer.config.exceptions import TrainerAppError
    from fastsac_trainer.run_dir import latest_checkpoint

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


def check_resumable(checkpoint: Path, run: Any, hosts: HostGroup | None = None) -> int:
    """The checkpoint's iteration, once its task, network, value support, replay and env steps fit ``run``.

    ``hosts``: this host's ``HostGroup`` in a run across hosts (None: one host). A run's iterations are
    all of one size (:meth:`~fastsac_trainer.plan.RunPlan.env_steps_per_iteration`): its env-step axis,
    its budget and its cadences count them, so a resume whose iteration would hold more or fewer env
    steps than the checkpoint recorded is refused (a checkpoint that records none, from an older
    trainer, is not checked).

    Checked before anything is written or started, so a mismatch is one line naming the setting,
    instead of a learner failing at start-up.

    Raises:
        TrainerAppError: The checkpoint was trained with a different task, network, value support or
            env count.
    """
    import dataclasses

    from fastsac_async import iteration_env_steps
    from fastsac_core import peek_checkpoint
    from fastsac_trainer.config.exceptions import TrainerAppError

    info = peek_checkpoint(checkpoint)
    if info["kind"] != "training":
        raise TrainerAppError(
            f"resume={str(checkpoint)!r} is invalid: it is a policy checkpoint (best.pt: actor and "
            "normalizer only, for trainer eval and export); resume from the run folder or a model_*.pt"
        )
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
    _check_support(checkpoint, info["config"], run.agent)
    learners = run.async_options.num_learners if run.asynchronous else 1
    num_envs = run.num_envs
    per_learner, saved_envs = num_envs // learners, info["buffer"]["num_envs"]
    if per_learner != saved_envs:
        raise TrainerAppError(
            f"task.num_envs={num_envs} over {learners} learner(s) gives {per_learner} envs per learner, "
            f"but {checkpoint} was trained with {saved_envs}; resume with the same task.num_envs and "
            "algo.trainer.async_options.num_learners"
        )
    iteration = int(info["extra"].get("iteration", 0))
    saved_steps = info["extra"].get("env_steps")  # None: written before checkpoints recorded it
    per_iteration = iteration_env_steps(num_envs, hosts)
    if saved_steps is not None and saved_steps != iteration * per_iteration:
        saved = int(saved_steps) // max(iteration, 1)
        count = 1 if hosts is None else hosts.num_hosts
        where = "" if count == 1 else f" on {count} hosts"
        fix = _same_iterations(saved, saved_envs, count, learners, asynchronous=run.asynchronous)
        raise TrainerAppError(
            f"task.num_envs={num_envs}{where} gives {per_iteration} env steps per iteration, but "
            f"{checkpoint} recorded {int(saved_steps):,} env steps at iteration {iteration} ({saved} per "
            "iteration): a run's env-step axis, budget and cadences count iterations of one size; resume "
            f"with {fix}, or start a new run (run_name=...) for another env count"
        )
    return iteration


def _check_support(checkpoint: Path, saved: dict[str, Any], agent: Any) -> None:
    """Refuse a resume whose critics' value support differs from the checkpoint's (``support_settings``).

    A task's default support may change between versions (Humanoid's top went from 1,000 to 1,600), so
    the fix names the checkpoint's values. (A saved support that is invalid is the load's to refuse.)

    Raises:
        TrainerAppError: A support setting differs.
    """
    from fastsac_core import ConfigError, FastSACConfig
    from fastsac_trainer.config.exceptions import TrainerAppError

    try:
        then = FastSACConfig.support_settings_of(saved)
    except ConfigError:
        return
    now = agent.support_settings
    if then != now:
        differ = " ".join(f"algo.agent.{k}={_override_value(v)}" for k, v in now.items() if then.get(k) != v)
        keep = " ".join(f"algo.agent.{k}={_override_value(v)}" for k, v in then.items() if now.get(k) != v)
        raise TrainerAppError(
            f"{differ} does not match {checkpoint}, whose critics were trained with {keep} (their outputs "
            f"are values on that support); resume with {keep}, or start a new run (run_name=...)"
        )


def _override_value(value: object) -> str:
    """``value`` as a command line writes it and reads back the same: ``true``, ``1600``, ``12.3456789``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value)


def _same_iterations(saved: int, per_learner: int, hosts: int, learners: int, *, asynchronous: bool) -> str:
    """The settings whose iterations hold ``saved`` env steps over learners of ``per_learner`` envs each.

    The checkpoint's learner count is its env steps per iteration over its envs per learner (every
    learner of every host held as many), so the fix also passes the envs-per-learner check.
    """
    all_learners, rest = divmod(saved, per_learner)
    if rest or not all_learners or all_learners % hosts:
        return f"{saved} envs in all, {per_learner} per learner"
    settings = [f"task.num_envs={saved // hosts}"]
    saved_learners = all_learners // hosts
    if saved_learners != learners:
        if not asynchronous:
            settings.append("algo.trainer.asynchronous=true")
        settings.append(f"algo.trainer.async_options.num_learners={saved_learners}")
    return " ".join(settings) + ("" if hosts == 1 else f" on {hosts} hosts")


def resume_line(plan: Any, resumed_at: int, one_launch: list[str] | None = None) -> str:
    """The line a resume prints: the checkpoint, its iteration, the replay it restores, ``one_launch``.

    ``one_launch`` are the settings of this launch only (never saved with the run). The replay part
    reads the files this host's learners will restore (``TrainingRun.replay_to_resume``, without
    their data) and says how old they are: their iteration against the checkpoint's, and when they
    were written. A missing or unreadable one is named: that learner starts empty.
    """
    line = _restored(plan, resumed_at)
    return f"{line}; this launch only: {' '.join(one_launch)}" if one_launch else line


def _restored(plan: Any, resumed_at: int) -> str:
    import time

    from fastsac_core import CheckpointError, peek_replay

    run = plan.run
    head = f"resuming from {run.resume_from} (iteration {resumed_at})"
    if not run.save_replay:
        return f"{head}; learning restarts from an empty replay buffer (algo.trainer.save_replay=false)"
    host = 0 if plan.hosts is None else plan.hosts.host_rank
    layouts = _replay_layouts(plan)
    found, empty = [], []
    for rank, layout in layouts.items():
        path = run.replay_to_resume(rank, host)
        try:  # the learner's own rule (ReplayLayout.counts): a file it would refuse is named here
            found.append(peek_replay(path, fits=layout))
        except CheckpointError as exc:
            empty.append(f"{path.name}: {'missing' if not path.exists() else exc}")
    if not found:
        why = "; ".join(empty)
        return f"{head}; no replay buffer to restore ({why}): learning restarts from an empty buffer"
    steps = sorted({info.gstep for info in found})
    of = f"iteration {steps[0]}" if len(steps) == 1 else f"iterations {steps[0]}-{steps[-1]}"
    behind = resumed_at - steps[0]
    if behind:
        of += f", {abs(behind)} iterations {'before' if behind > 0 else 'after'} the checkpoint"
    age = time.time() - min(info.written_at for info in found)
    line = (
        f"{head}; replay buffer of {sum(info.transitions for info in found):,} transitions from {of},"
        f" written {_duration(age)} ago"
    )
    if empty:
        line += f"; {len(empty)} of {len(layouts)} learners start with an empty buffer ({'; '.join(empty)})"
    return line


def check_replay_fits(plan: Any) -> None:
    """Refuse a resume whose replay files are whole but do not fit this launch's buffers.

    Checked before anything is written: a learner would otherwise restart from an empty buffer and
    write its own file over the run's at its first replay write (fewer collectors per learner, a
    synchronous resume of an asynchronous run). A missing or unreadable file is no refusal: there is
    nothing to keep, and the resume line says that learner starts empty.

    Raises:
        TrainerAppError: A replay file that does not fit (the rule the learner applies,
            ``ReplayLayout.counts``), with the fix.
    """
    from fastsac_core import CheckpointError, ReplayBufferError, peek_replay
    from fastsac_trainer.config.exceptions import TrainerAppError

    run = plan.run
    host = 0 if plan.hosts is None else plan.hosts.host_rank
    for rank, layout in _replay_layouts(plan).items():
        path = run.replay_to_resume(rank, host)
        if path is None or not path.is_file():
            continue
        try:
            peek_replay(path, fits=layout)
        except CheckpointError as error:
            if not isinstance(error.__cause__, ReplayBufferError):
                continue  # unreadable: nothing to keep (a fit that fails is the buffer's own error)
            raise TrainerAppError(
                f"resume={str(run.resume_from)!r} is invalid: {error}; resume with the run's own layout "
                f"(its trainer, collectors, learners and task.num_envs), or move {path} away to restart "
                "learning from an empty buffer"
            ) from None


def _replay_layouts(plan: Any) -> dict[int, Any]:
    """Run-wide rank -> ``ReplayLayout`` of each replay buffer this host's learners build.

    The asynchronous learners' come from the engine's own rules (``EngineSpec.replay_layout``,
    ``hosts.learner_rank``); the synchronous trainer's is its one buffer of every env.
    """
    from fastsac_core import ReplayLayout

    if not plan.asynchronous:
        return {0: ReplayLayout.of(plan.run.dims, plan.agent, plan.num_envs)}
    from fastsac_async import EngineSpec, learner_rank

    spec = EngineSpec(
        run=plan.run, agent=plan.agent, options=plan.async_options, topology=plan.topology, hosts=plan.hosts
    )
    return {learner_rank(spec, r): spec.replay_layout(r) for r in range(spec.num_learners)}


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(seconds, 0):.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def run_with_console(
    plan: Any,
    console_mode: str,
    trainer_fn: Callable[..., object],
    log: ParentLog,
    resumed_at: int | None = None,
    outcome: RunOutcome | None = None,
) -> int:
    """Run ``trainer_fn`` on ``plan`` with the console, the parent's log and TensorBoard; the exit code.

    Args:
        plan: The run (``fastsac_trainer.plan.RunPlan``).
        console_mode: ``auto``, ``rich`` or ``plain``.
        trainer_fn: What :func:`select_trainer` returned.
        log: The launch's ``logs/trainer.log``, open in the run folder (Note [the parent's log tells
            the whole story]): it gets every console line and boot line too.
        resumed_at: Iteration of the checkpoint resumed (the loggers hide later points), or None.
        outcome: The Python API's record of the run (one more reporter, told how the run ended), or None.
    """
    from fastsac_core import use_compile_cache
    from fastsac_trainer.console import open_console

    title = f"{plan.task_name}/fastsac"
    logged = log.console(title)
    # Before anything compiles or is spawned: the workers inherit it (Note [compile cache]).
    use_compile_cache()
    console = open_console(console_mode, title=title)
    return _run_logged(plan, console, logged, trainer_fn, resumed_at, outcome)


class _BootLogged:
    """The console's boot view that also writes each worker's state change into the parent's log."""

    def __init__(self, console: Any, logged: Any) -> None:
        self._console, self._logged = console, logged

    def worker_state(self, name: str, state: str) -> None:
        """Show the state and write its ``boot: ...`` line into the log."""
        self._console.worker_state(name, state)
        self._logged.worker_state(name, state)

    def failed(self, name: str, reason: str, log_path: Path | None, *, during_boot: bool = True) -> None:
        """Tell the console, which says it once as the run's last line (the log gets that line too)."""
        self._console.failed(name, reason, log_path, during_boot=during_boot)


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

    from fastsac_core import replay_write_hold
    from fastsac_trainer.cluster import HostLostError
    from fastsac_trainer.console import STOP_SIGNALS, ConsoleLogHandler, FanOut, StopRequest
    from fastsac_trainer.loggers import open_loggers
    from fastsac_trainer.run_dir import latest_checkpoint, remove_untrained_run
    from fastsac_trainer.seeds import seed_group
    from fastsac_trainer.support_watch import SupportWatch

    handler = ConsoleLogHandler(console)
    root = logging.getLogger()
    config = _saved_config(plan.run.run_dir)
    # Across hosts, host 0 alone writes the run's events (the others keep their logs).
    primary = plan.hosts is None or plan.hosts.primary
    opened = open_loggers(plan.run.run_dir, config, resumed_at=resumed_at,
                          env_steps_per_iteration=plan.env_steps_per_iteration,
                          group=seed_group(plan.run.run_dir.name, config)) if primary else []  # fmt: skip
    loggers = FanOut(opened)
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
        hold=replay_write_hold,  # this process's writes (sync); the async engine waits for its learners'
    )
    reporters = [console, logged, loggers, SupportWatch(plan.agent)]  # Note [support watch]
    if outcome is not None:
        reporters.append(outcome)
    result: object = None
    aborted = False  # the trainer did not return: stopped at once (a trainer that returned is done)
    lost: HostLostError | None = None
    try:
        with console, stop:
            root.addHandler(handler)
            result = trainer_fn(
                plan,
                FanOut(reporters),
                should_stop=stop,
                boot_view=_BootLogged(console, logged),
                should_abort=lambda: stop.aborted,
                force_abort=lambda: stop.forced,
            )
    except BaseException as error:
        if isinstance(error, HostLostError):  # another host is gone: the line names it
            lost = error
        elif stop.aborted:
            aborted = True
            _log.debug("stopped at once", exc_info=error)
        elif isinstance(error, Exception) and console.failure is not None:
            _log.debug("boot failed", exc_info=error)
        else:
            raise
    finally:
        root.removeHandler(handler)
        loggers.close()
    failure = lost if lost is not None else console.failure
    if outcome is not None:
        outcome.ended(plan.run.run_dir, result, stop.reason, failure, aborted)
    if aborted:
        latest = latest_checkpoint(plan.run.run_dir)
        return final_line(
            f"stopped at once ({stop.abort_cause}): no final checkpoint, the last one is "
            f"{latest or 'none'}; run folder {plan.run.run_dir}",
            sys.stderr,
            128 + (stop.abort_signal or signal.SIGINT),
        )
    if failure is not None:
        return final_line(f"error: {failure.line()}", sys.stderr, EXIT_FAILED)
    where = f"run folder {plan.run.run_dir}"
    # A new run stopped during start-up trained nothing: its folder goes unless it holds more than the
    # start-up wrote. The parent's log is still open; its last line goes to the removed file.
    new = plan.run.resume_from is None and plan.hosts is None
    never_trained = getattr(result, "stop_reason", None) == "stopped_during_boot"
    if new and never_trained and remove_untrained_run(plan.run.run_dir):
        where = f"nothing was trained, so the run folder {plan.run.run_dir} is removed"
    return final_line(f"done: {summary(result, stop.reason)}; {where}", sys.stdout, 0)


def _saved_config(run_dir: Path) -> dict[str, Any]:
    """The resolved config the run folder holds (``config.yaml``, written before the run starts)."""
    from omegaconf import OmegaConf

    from fastsac_async import RunLayout

    return OmegaConf.to_container(OmegaConf.load(RunLayout(run_dir).config), resolve=True)  # type: ignore[return-value]


def select_trainer(asynchronous: bool) -> Callable[..., object]:
    """The trainer: ``fn(plan, reporter, should_stop=..., boot_view=..., should_abort=..., force_abort=...)``.

    The synchronous trainer is ``fastsac_trainer.sync_trainer.run_sync(plan, reporter, should_stop=...)``
    (it takes no boot view, and is aborted by an exception, not by polling); the asynchronous one
    is ``fastsac_trainer.async_trainer.run_async(plan, reporter, should_stop=..., boot_view=...,
    should_abort=..., force_abort=...)``, imported only when asked for, so a build without
    ``fastsac_trainer.async_trainer`` still trains synchronously. The synchronous path imports
    ``fastsac_async`` too (its records: ``AsyncOptions``, ``StopReason``), but starts no engine and no
    worker.

    Raises:
        TrainerAppError: The asynchronous trainer is not part of this build.
    """
    from fastsac_trainer.config.exceptions import TrainerAppError

    if not asynchronous:
        from fastsac_trainer.sync_trainer import run_sync

        def sync(
            plan: Any,
            reporter: Any,
            *,
            should_stop: Callable[[], bool],
            boot_view: Any,
            should_abort: Callable[[], bool] | None = None,
            force_abort: Callable[[], bool] | None = None,
        ) -> object:
            # No polling for an abort: in one process it is a KeyboardInterrupt (StopRequest).
            return run_sync(plan, reporter, should_stop=should_stop)

        return sync
    try:
        from fastsac_trainer.async_trainer import run_async  # type: ignore[import-not-found, unused-ignore]
    except ModuleNotFoundError as error:
        if error.name != "fastsac_trainer.async_trainer":
            raise
        raise TrainerAppError(
            "algo.trainer.asynchronous=True is invalid: the asynchronous trainer is not in this build; "
            "use algo.trainer.asynchronous=false"
        ) from None
    return run_async  # type: ignore[no-any-return, unused-ignore]
