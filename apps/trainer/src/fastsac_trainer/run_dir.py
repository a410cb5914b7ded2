"""The run folder: ``runs/<run>/`` with the resolved config, logs, error logs, checkpoints and events.

Layout (see ``wiki/trainer.md``)::

    runs/<run>/
        config.yaml          the resolved configuration (what ``--cfg job`` prints)
        logs/<worker>.log    stdout, stderr and logging of each worker process
        async_errors/        <worker>_error.log: the traceback of a worker that died
        checkpoints/         model_<iteration:07d>.pt
        events.out.tfevents.*  TensorBoard scalars
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from fastsac_async.spec import checkpoint_dir, checkpoint_step
from fastsac_core import discard_partial_checkpoints
from fastsac_trainer.config.exceptions import TrainerAppError

__all__ = [
    "CONFIG_FILE",
    "create_default_run_dir",
    "create_run_dir",
    "default_run_name",
    "errors_dir",
    "latest_checkpoint",
    "logs_dir",
    "resolve_resume",
]

CONFIG_FILE = "config.yaml"
"""Name of the resolved config inside a run folder."""


def default_run_name(task: str, now: float | None = None) -> str:
    """``<task>-<YYYYmmdd-HHMMSS>`` for a run started at ``now`` (default: the current time)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return f"{task}-{stamp}"


def logs_dir(run_dir: Path) -> Path:
    """Folder of the per-worker log files."""
    return run_dir / "logs"


def errors_dir(run_dir: Path) -> Path:
    """Folder of the per-worker error logs (tracebacks of workers that died)."""
    return run_dir / "async_errors"


def create_run_dir(runs_root: Path, run_name: str, config_yaml: str, *, resuming: bool = False) -> Path:
    """Create ``runs_root/run_name`` with its sub-folders and write the resolved config.

    A new run claims its folder atomically: the folder must be missing or empty, and ``config.yaml``
    is created exclusively, so of several runs started at once with one name exactly one gets the
    folder and the others are refused. A resume writes into its own run folder.

    Args:
        runs_root: Folder holding run folders (created when missing).
        run_name: Name of this run's folder.
        config_yaml: The resolved configuration, written to ``config.yaml``.
        resuming: Allow an existing run folder (a resumed run writes into its own folder).

    Returns:
        The run folder.

    Raises:
        TrainerAppError: The folder holds something already (another run) and this is not a resume
            into it.
    """
    run_dir = runs_root / run_name
    if resuming:
        _make_layout(run_dir)
        # A run killed while it wrote a checkpoint leaves that write's temporary file (never read as a
        # checkpoint): the resumed run owns the folder, so no other writer can be using one.
        discard_partial_checkpoints(checkpoint_dir(run_dir))
        (run_dir / CONFIG_FILE).write_text(config_yaml, encoding="utf-8")
        return run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    if any(run_dir.iterdir()) or not _claim(run_dir, config_yaml):
        raise TrainerAppError(_taken(run_name, run_dir))
    _make_layout(run_dir)
    return run_dir


def create_default_run_dir(runs_root: Path, task: str, config_yaml: str, *, now: float | None = None) -> Path:
    """Create a new run folder named ``default_run_name(task, now)``, or that name with ``-2``, ``-3``...

    The first name whose folder this call creates itself (an exclusive ``mkdir``) is the run's, so
    runs started in the same second never share a folder, and no existing folder is written into.

    Returns:
        The run folder, with its sub-folders and ``config.yaml``.
    """
    base = default_run_name(task, now)
    for count in itertools.count(1):
        run_dir = runs_root / (base if count == 1 else f"{base}-{count}")
        try:
            run_dir.mkdir(parents=True)
        except FileExistsError:
            continue
        if _claim(run_dir, config_yaml):
            break
    _make_layout(run_dir)
    return run_dir


def _make_layout(run_dir: Path) -> None:
    for folder in (run_dir, logs_dir(run_dir), errors_dir(run_dir), checkpoint_dir(run_dir)):
        folder.mkdir(parents=True, exist_ok=True)


def _claim(run_dir: Path, config_yaml: str) -> bool:
    """Create ``config.yaml`` exclusively: False when another run created it first."""
    try:
        with (run_dir / CONFIG_FILE).open("x", encoding="utf-8") as file:
            file.write(config_yaml)
    except FileExistsError:
        return False
    return True


def _taken(run_name: str, run_dir: Path) -> str:
    """The one-line refusal of a new run into ``run_dir``, which holds something already."""
    if checkpoint_dir(run_dir).is_dir() and any(checkpoint_dir(run_dir).iterdir()):
        return (
            f"run_name={run_name!r} is invalid: {run_dir} holds checkpoints already; "
            f"choose another run_name or pass resume={run_dir}"
        )
    return (
        f"run_name={run_name!r} is invalid: {run_dir} is not empty; choose another run_name, "
        "or leave it unset for a new <task>-<time> folder"
    )


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint of the highest iteration in a run folder, or None when it has none.

    What counts as a checkpoint is ``fastsac_async.spec.checkpoint_step``'s to say (``best.pt`` does not).
    """
    found: list[tuple[int, Path]] = []
    folder = checkpoint_dir(run_dir)
    if folder.is_dir():
        for path in folder.iterdir():
            step = checkpoint_step(path)
            if step is not None:
                found.append((step, path))
    return max(found)[1] if found else None


def resolve_resume(target: str, setting: str = "resume") -> tuple[Path, Path | None]:
    """Turn ``resume=<run folder or checkpoint>`` into (checkpoint file, run folder it belongs to).

    ``setting`` is the option's name in the messages (``checkpoint`` for ``trainer eval``).

    A checkpoint file outside a run's ``checkpoints/`` folder (a copy, a download) belongs to no run
    folder: None, and the resumed run gets a new one rather than writing beside that file.

    Raises:
        TrainerAppError: The path does not exist, or the run folder holds no checkpoint.
    """
    path = Path(target).expanduser()
    if path.is_file():
        owner = path.parent.parent
        in_run = path.parent.name == "checkpoints" and (owner / CONFIG_FILE).is_file()
        return path, owner if in_run else None
    if path.is_dir():
        run_dir = path.parent if path.name == "checkpoints" else path
        latest = latest_checkpoint(run_dir)
        if latest is None:
            raise TrainerAppError(
                f"{setting}={target!r} is invalid: {checkpoint_dir(run_dir)} holds no model_*.pt checkpoint; "
                "pass a run folder that has saved at least one checkpoint, or a checkpoint file"
            )
        return latest, run_dir
    raise TrainerAppError(
        f"{setting}={target!r} is invalid: no such file or folder; pass a run folder (runs/<run>) "
        "or a checkpoint file (runs/<run>/checkpoints/model_0001000.pt)"
    )
