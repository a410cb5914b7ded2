"""The run's metric loggers, chosen by ``logger=``: TensorBoard, Weights & Biases, or both.

``logger=tensorboard`` (default), ``logger=wandb`` or ``logger=tensorboard,wandb``. Each logger is a
:class:`~fastsac_trainer.reporting.Reporter` and records the same scalars
(:func:`fastsac_trainer.tensorboard.logged_scalars`) against env steps, with the run's config. W&B is an
optional extra (``uv sync --extra wandb``); its ``wandb.project`` and ``wandb.entity`` options name where
the run goes, ``WANDB_MODE=offline`` keeps it on disk (``runs/<run>/wandb/``, upload later with ``wandb
sync``). A run's W&B id is kept in ``runs/<run>/wandb_id.txt``, so a resume continues the same W&B run.
"""

from __future__ import annotations

import importlib
import importlib.util
import secrets
from pathlib import Path
from typing import Any

from fastsac_trainer.reporting import Reporter, Snapshot
from fastsac_trainer.tensorboard import TensorBoardReporter, logged_scalars

__all__ = ["LOGGERS", "WandbReporter", "open_loggers", "quote_logger_list", "wandb_missing"]

LOGGERS = ("tensorboard", "wandb")
"""The names ``logger=`` takes, comma separated."""

_ID_FILE = "wandb_id.txt"
_ENV_STEPS = "env_steps"


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
        run_dir: The run folder: W&B's files go to ``run_dir/wandb``, the run id to ``wandb_id.txt``.
        config: The resolved config (W&B's run config).
        project: W&B project.
        entity: W&B entity (user or team); None: the default of the logged-in user.
        group: Group of the run (the seeds of one command share one).
    """

    def __init__(
        self, run_dir: Path, config: dict[str, Any], project: str, entity: str | None, group: str | None
    ) -> None:
        wandb: Any = importlib.import_module("wandb")
        id_file = run_dir / _ID_FILE
        if id_file.is_file():
            run_id = id_file.read_text(encoding="utf-8").strip()
        else:
            run_id = secrets.token_hex(4)  # W&B ids: letters and digits
            id_file.write_text(f"{run_id}\n", encoding="utf-8")
        self._run = wandb.init(
            project=project, entity=entity, group=group, name=run_dir.name, id=run_id, resume="allow",
            dir=str(run_dir), config=config,
            # Its own console capture and messages would tear the live panel: the console is the app's.
            settings=wandb.Settings(console="off", silent=True),
        )  # fmt: skip
        # Every metric is plotted against env steps (W&B's own step only counts log calls).
        self._run.define_metric(_ENV_STEPS)
        self._run.define_metric("*", step_metric=_ENV_STEPS)

    def report(self, snapshot: Snapshot) -> None:
        """Log the snapshot's scalars (the TensorBoard ones) with its env steps."""
        self._run.log({**logged_scalars(snapshot), _ENV_STEPS: snapshot.env_steps})

    def checkpoint_saved(self, path: Path) -> None:
        """Nothing to record for a checkpoint."""

    def close(self) -> None:
        """Finish the W&B run (offline: its files are complete on disk)."""
        self._run.finish()


def open_loggers(
    run_dir: Path, config: dict[str, Any], *, resumed_at_env_steps: int | None, group: str | None
) -> list[Reporter]:
    """The loggers ``config["logger"]`` names, writing into ``run_dir``."""
    names = config["logger"].split(",")
    loggers: list[Reporter] = []
    if "tensorboard" in names:
        loggers.append(TensorBoardReporter(run_dir, resumed_at_env_steps, config))
    if "wandb" in names:
        options = config["wandb"]
        loggers.append(WandbReporter(run_dir, config, options["project"], options["entity"], group))
    return loggers
