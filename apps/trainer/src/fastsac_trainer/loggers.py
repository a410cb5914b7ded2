"""The run's metric loggers, chosen by ``logger=``: TensorBoard, Weights & Biases, or both.

``logger=tensorboard`` (default), ``logger=wandb`` or ``logger=tensorboard,wandb``. Each logger is a
:class:`~fastsac_trainer.reporting.Reporter` and records the same scalars
(:func:`fastsac_trainer.tensorboard.logged_scalars`) against env steps, with the run's config. W&B is an
optional extra (``uv sync --extra wandb``); its ``wandb.project`` and ``wandb.entity`` options name where
the run goes, ``WANDB_MODE=offline`` keeps it on disk (``runs/<run>/wandb/``, upload later with ``wandb
sync``). A run's W&B id is kept in ``runs/<run>/wandb_id.txt``, so a resume continues the same W&B run.

Note [W&B across a resume]: W&B's own step (``_step``) is the iteration, logged explicitly; every scalar is
plotted against ``env_steps`` (a defined step metric). A resume from the checkpoint of iteration ``I``
rewinds the W&B run there (``resume_from="<id>?_step=I"``): W&B keeps the history up to ``I`` and archives
what the killed launch logged past it, so the curve continues from the checkpoint, as TensorBoard's does
(``purge_step``). Offline, the rewind is written into the launch's ``.wandb`` file and done by ``wandb
sync``. A server that refuses the rewind (a W&B preview feature) gets a plain resume (``resume="allow"``)
with W&B counting ``_step`` on from its last one, so no point is dropped as a step below W&B's; the points
the killed launch logged past the checkpoint then stay, and the env-steps curve doubles back there.
From then on the W&B run's step is W&B's own count, not the iteration, so ``wandb_id.txt`` says so on
a second line and every later resume of the run resumes it plainly too (a rewind to an iteration
would cut its history at the wrong point).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import secrets
from pathlib import Path
from typing import Any

from fastsac_async import RunLayout
from fastsac_trainer.reporting import EvalPoint, Reporter, Snapshot
from fastsac_trainer.tensorboard import VIDEO_TAG, TensorBoardReporter, eval_scalars, logged_scalars

__all__ = ["LOGGERS", "WandbReporter", "open_loggers", "quote_logger_list", "wandb_missing"]

LOGGERS = ("tensorboard", "wandb")
"""The names ``logger=`` takes, comma separated."""

_COUNTED = "steps-counted-by-wandb"
"""The word on ``wandb_id.txt``'s second line once W&B's step stopped being the iteration."""
_ENV_STEPS = "env_steps"
_EVAL_ENV_STEPS = "eval_env_steps"
"""The x axis of the eval/* metrics in W&B: the env steps of the evaluated weights."""
_FLUSH_S = 1.0
"""Seconds between writes of W&B's local ``.wandb`` file (W&B's default, 15 s, loses that much of a killed
run, the points just before its last checkpoint included)."""

_log = logging.getLogger(__name__)


def quote_logger_list(overrides: list[str]) -> list[str]:
    """``overrides`` with ``logger=a,b`` quoted as one string (hydra would read it as a sweep)."""
    return [
        f"logger='{o.partition('=')[2]}'" if o.startswith("logger=") and "," in o and "'" not in o else o
        for o in overrides
    ]


def wandb_missing(logger: str) -> bool:
    """True when ``logger`` names wandb and the ``wandb`` package is not installed."""
    return "wandb" in logger.split(",") and importlib.util.find_spec("wandb") is None


class WandbReporter:
    """Logs every snapshot's scalars to a Weights & Biases run, against env steps.

    Args:
        run_dir: The run folder: W&B's files go to ``RunLayout.wandb_files``, the run id to ``wandb_id``.
        config: The resolved config (W&B's run config).
        project: W&B project.
        entity: W&B entity (user or team); None: the default of the logged-in user.
        group: Group of the run (the seeds of one command share one).
        resumed_at_iteration: The iteration of the checkpoint this launch resumes, if any: the W&B
            run is rewound there (Note [W&B across a resume]).
    """

    def __init__(
        self,
        run_dir: Path,
        config: dict[str, Any],
        project: str,
        entity: str | None,
        group: str | None,
        resumed_at_iteration: int | None = None,
    ) -> None:
        wandb: Any = importlib.import_module("wandb")
        self._wandb = wandb
        self._evals: list[EvalPoint] = []  # finished since the last snapshot
        self._last_iteration: int | None = None
        id_file = RunLayout(run_dir).wandb_id
        known = id_file.is_file()
        counted = False  # W&B's step stopped being the iteration (a rewind was refused earlier)
        if known:
            run_id, *rest = id_file.read_text(encoding="utf-8").split()
            counted = _COUNTED in rest
        else:
            run_id = secrets.token_hex(4)  # W&B ids: letters and digits
            id_file.write_text(f"{run_id}\n", encoding="utf-8")
        init = dict(
            project=project, entity=entity, group=group, name=run_dir.name, id=run_id, dir=str(run_dir),
            config=config,
            # Its own console capture and messages would tear the live panel: the console is the app's.
            settings=wandb.Settings(console="off", silent=True, x_transaction_log_flush_interval=_FLUSH_S),
        )  # fmt: skip
        self._step_is_iteration = not counted
        if known and resumed_at_iteration is not None and counted:
            _log.warning(
                "W&B run %s counts its own steps since a rewind was refused: resuming it, not rewinding it "
                "to iteration %d (its curves double back at each resume)", run_id, resumed_at_iteration,
            )  # fmt: skip
            self._run = wandb.init(**init, resume="allow")
        elif known and resumed_at_iteration is not None:
            try:
                self._run = wandb.init(**init, resume_from=f"{run_id}?_step={resumed_at_iteration}")
            except wandb.errors.Error as error:
                _log.warning(
                    "W&B did not rewind run %s to its checkpoint (iteration %d): %s; resuming it instead: "
                    "what the last launch logged past the checkpoint stays, and the curves double back "
                    "there (plot against W&B's Step or wall time to tell the launches apart)",
                    run_id, resumed_at_iteration, error,
                )  # fmt: skip
                self._run = wandb.init(**init, resume="allow")
                self._step_is_iteration = False
                # From here on W&B's step is its own count: a later rewind to an iteration would cut
                # the history at the wrong point, so later resumes of this run resume it plainly.
                id_file.write_text(f"{run_id}\n{_COUNTED}\n", encoding="utf-8")
        else:
            self._run = wandb.init(**init, resume="allow")
        # Every metric is plotted against env steps (W&B's own step is the iteration).
        self._run.define_metric(_ENV_STEPS)
        self._run.define_metric("*", step_metric=_ENV_STEPS)
        self._run.define_metric(_EVAL_ENV_STEPS)
        self._run.define_metric("eval/*", step_metric=_EVAL_ENV_STEPS)

    def report(self, snapshot: Snapshot) -> None:
        """Log the snapshot's scalars (the TensorBoard ones) with its env steps, at its iteration.

        The latest evaluation finished since the last snapshot goes into the same step, against its
        own x axis ``eval_env_steps`` (the env steps of its weights: W&B's step only moves forward).
        """
        scalars: dict[str, Any] = {**logged_scalars(snapshot), _ENV_STEPS: snapshot.env_steps}
        scalars.update(self._eval_row())
        self._log(scalars, snapshot.iteration)

    def evaluated(self, point: EvalPoint) -> None:
        """Keep the evaluation for the next snapshot's step (or the last step, at the end)."""
        self._evals.append(point)

    def _eval_row(self) -> dict[str, Any]:
        """The latest evaluation since the last row (its scalars, x and clip), forgetting the others."""
        if not self._evals:
            return {}
        point, self._evals = self._evals[-1], []
        row: dict[str, Any] = {**eval_scalars(point), _EVAL_ENV_STEPS: point.env_steps}
        if point.video is not None:
            # The MP4, or its GIF alone where no MP4 could be written (fastsac_trainer.video).
            clip = next((f for f in (point.video, point.video.with_suffix(".gif")) if f.is_file()), None)
            if clip is not None:
                row[VIDEO_TAG] = self._wandb.Video(str(clip), format=clip.suffix.lstrip("."))
        return row

    def _log(self, row: dict[str, Any], iteration: int) -> None:
        if self._step_is_iteration:
            self._run.log(row, step=iteration, commit=True)
        else:
            self._run.log(row)  # after a plain resume, W&B's step counts on from its last one
        self._last_iteration = iteration

    def checkpoint_saved(self, path: Path) -> None:
        """Nothing to record for a checkpoint."""

    def close(self) -> None:
        """Log an evaluation that came after the last snapshot (one step on), then finish the W&B run."""
        row = self._eval_row()
        if row:
            self._log(row, (self._last_iteration or 0) + 1)
        self._run.finish()


def open_loggers(
    run_dir: Path,
    config: dict[str, Any],
    *,
    resumed_at: int | None,
    env_steps_per_iteration: int,
    group: str | None,
) -> list[Reporter]:
    """The loggers ``config["logger"]`` names, writing into ``run_dir``.

    Args:
        run_dir: The run folder.
        config: The resolved config.
        resumed_at: The iteration of the checkpoint this launch resumes, if any.
        env_steps_per_iteration: Env steps of one iteration of the whole run (every host's envs): a
            resume's TensorBoard events start at the checkpoint's, ``resumed_at`` times this (a resume
            keeps it: ``fastsac_trainer.launch.check_resumable``).
        group: The W&B group (the seeds of one command share one), if any.
    """
    names = config["logger"].split(",")
    loggers: list[Reporter] = []
    if "tensorboard" in names:
        resumed_at_env_steps = None if resumed_at is None else resumed_at * env_steps_per_iteration
        loggers.append(TensorBoardReporter(RunLayout(run_dir).events, resumed_at_env_steps, config))
    if "wandb" in names:
        options = config["wandb"]
        loggers.append(
            WandbReporter(run_dir, config, options["project"], options["entity"], group, resumed_at)
        )
    return loggers
