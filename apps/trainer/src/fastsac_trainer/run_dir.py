"""The run folder: creating ``runs/<run>/`` (claimed atomically), finding its checkpoints, resolving a resume.

The names inside a run folder are ``fastsac_async.run_layout.RunLayout``'s (see ``wiki/trainer.md``).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

from fastsac_async import RunLayout, checkpoint_step
from fastsac_core import discard_partial_checkpoints
from fastsac_trainer.config.exceptions import TrainerAppError

_log = logging.getLogger(__name__)

__all__ = [
    "check_run_name",
    "create_default_run_dir",
    "create_run_dir",
    "default_run_name",
    "hold_run_dir",
    "latest_checkpoint",
    "release_run_dir",
    "remove_untrained_run",
    "resolve_resume",
]


def check_run_name(name: str, runs_root: str = "runs") -> str:
    """``name`` once it is one plain folder name, so that the run folder is a child of ``runs_root``.

    Raises:
        TrainerAppError: It is empty, ``.`` or ``..``, or it holds a path separator: the run folder
            would be ``runs_root`` itself, or outside it.
    """
    if not name:
        raise TrainerAppError(
            "run_name='' is invalid: it is empty; give a folder name, or leave run_name out for a new "
            "<task>-<time> folder"
        )
    if name in (".", "..") or any(sep in name for sep in ("/", "\0", os.sep, os.altsep) if sep):
        where = Path(os.path.normpath(Path(runs_root, name)))
        example = f" (here runs_root={where.parent} run_name={where.name})" if where.name else ""
        raise TrainerAppError(
            f"run_name={name!r} is invalid: a run name is one folder name inside runs_root, with no '/' and "
            f"not '.' or '..'; to put a run elsewhere set runs_root=DIR run_name=NAME{example}"
        )
    return name


def default_run_name(task: str, now: float | None = None) -> str:
    """``<task>-<YYYYmmdd-HHMMSS>`` for a run started at ``now`` (default: the current time)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return f"{task}-{stamp}"


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
            into it, or it cannot be created or written there.
    """
    run_dir = runs_root / run_name
    if resuming:
        with _writing(runs_root, run_dir, resuming=True), _held_or_released(run_dir):
            hold_run_dir(run_dir)  # before anything is written: another trainer may be running in it
            _make_layout(run_dir)
            # A run killed while it wrote a checkpoint leaves that write's temporary file (never read as a
            # checkpoint): the resumed run owns the folder, so no other writer can be using one.
            discard_partial_checkpoints(RunLayout(run_dir).checkpoints)
            RunLayout(run_dir).config.write_text(config_yaml, encoding="utf-8")
        return run_dir
    made = _missing(run_dir)
    with _writing(runs_root, run_dir, existing=run_dir not in made), _held_or_released(run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
        if any(run_dir.iterdir()) or not _claim(run_dir, config_yaml, made):
            raise TrainerAppError(_taken(run_name, run_dir))
        with _undone_on_failure(run_dir, made):
            hold_run_dir(run_dir, patience_s=_CLAIMED_PATIENCE_S)
            _make_layout(run_dir)
    return run_dir


@contextlib.contextmanager
def _held_or_released(run_dir: Path) -> Iterator[None]:
    """Inside, a failure lets go of ``run_dir``'s lock again: the caller never gets the folder."""
    try:
        yield
    except BaseException:
        release_run_dir(run_dir)
        raise


def create_default_run_dir(runs_root: Path, task: str, config_yaml: str, *, now: float | None = None) -> Path:
    """Create a new run folder named ``default_run_name(task, now)``, or that name with ``-2``, ``-3``...

    The first name whose folder this call creates itself (an exclusive ``mkdir``) is the run's, so
    runs started in the same second never share a folder, and no existing folder is written into.

    Returns:
        The run folder, with its sub-folders and ``config.yaml``.

    Raises:
        TrainerAppError: ``runs_root`` is a file, or no folder can be created in it.
    """
    base = default_run_name(task, now)
    for count in itertools.count(1):
        run_dir = runs_root / (base if count == 1 else f"{base}-{count}")
        made = _missing(run_dir)
        with _writing(runs_root, run_dir):
            try:
                run_dir.mkdir(parents=True)
            except FileExistsError:
                continue
            if _claim(run_dir, config_yaml, made):
                break
    with _writing(runs_root, run_dir), _held_or_released(run_dir), _undone_on_failure(run_dir, made):
        hold_run_dir(run_dir, patience_s=_CLAIMED_PATIENCE_S)
        _make_layout(run_dir)
    return run_dir


def _missing(run_dir: Path) -> list[Path]:
    """``run_dir`` and those of its parents that do not exist (yet), innermost first."""
    return list(itertools.takewhile(lambda folder: not folder.exists(), (run_dir, *run_dir.parents)))


@contextlib.contextmanager
def _undone_on_failure(run_dir: Path, made: list[Path]) -> Iterator[None]:
    """Inside, a failure removes what this launch made of the new run ``run_dir``, which it claimed.

    Everything in ``run_dir`` is this launch's (it claimed the folder empty); ``made`` are the folders
    it created (:func:`_missing`), removed while empty: another run may have started in one meanwhile.
    """
    try:
        yield
    except BaseException:
        _remove_claimed(run_dir, made)
        raise


def _remove_claimed(run_dir: Path, made: list[Path]) -> None:
    """Empty the claimed ``run_dir``, then remove the folders of ``made`` (:func:`_remove_empty`)."""
    import shutil

    with contextlib.suppress(OSError):
        for path in run_dir.iterdir():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    _remove_empty(made)


def _remove_empty(made: list[Path]) -> None:
    """Remove the folders of ``made`` (innermost first) while they are empty: a full one is another run's."""
    for folder in made:
        try:
            folder.rmdir()
        except OSError:
            return


_HELD: dict[Path, int] = {}
"""The run folders this process holds (Note [run folder lock]), by resolved path: the lock file's fd."""


_CLAIMED_PATIENCE_S = 1.0
"""How long a new run that claimed its folder waits for its lock: only another launch's look at the lock
(:func:`_holder`, while it words its refusal) can hold it then, and only for a moment."""


def hold_run_dir(run_dir: Path, *, patience_s: float = 0.0) -> None:
    """Lock ``run_dir`` for this process until :func:`release_run_dir` (or the process ends).

    # Note [run folder lock]
    Two trainers writing one run folder (a job requeued while the old one still runs, a resume
    started twice) would interleave their checkpoints and overwrite each other's replay file and
    logs. Every trainer holds an exclusive ``flock`` on the folder's ``run.lock`` while it runs (a
    new run once it has claimed the folder, a resume before it writes anything); the kernel drops
    the lock when the holder exits, a crash included, so no lock is ever stale. A host of a run
    across hosts holds its own folder's (``host<R>/``).
    A launch refused a folder only looks at its lock to word the refusal (:func:`_holder`), which holds
    it for a moment; the run that claimed the folder waits that out (``patience_s``).

    Args:
        run_dir: The run folder.
        patience_s: How long to retry a lock held elsewhere before giving up (0: at once).

    Raises:
        TrainerAppError: Another live process holds it (named by its pid, which it wrote into the file).
    """
    import fcntl

    key = run_dir.resolve()
    if key in _HELD:
        return
    path = RunLayout(run_dir).lock
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + patience_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.01)
                continue
            holder = _pid_in(fd)
            os.close(fd)
            raise TrainerAppError(_in_use(run_dir, holder)) from None
        except OSError as error:  # a filesystem without flock (NFS without lockd, Lustre without -o flock)
            os.close(fd)
            _log.warning("%s cannot be locked (%s): nothing stops a second trainer on it", run_dir, error)
            return
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _HELD[key] = fd


def _pid_in(fd: int) -> str:
    """The pid a holder wrote into the lock file open as ``fd`` ("?" before it wrote it)."""
    return os.read(fd, 32).decode(errors="replace").strip() or "?"


def _in_use(run_dir: Path, holder: str) -> str:
    """Why a trainer cannot have ``run_dir``: process ``holder`` holds its lock."""
    return (
        f"{run_dir} is in use by another trainer (pid {holder}); two trainers writing one run folder "
        "would mix their checkpoints: wait for it to end or stop it, or use another run_name"
    )


def _holder(run_dir: Path) -> str | None:
    """The pid of another live process that holds ``run_dir``'s lock, or None when none does.

    A look, not a hold: it never touches this process's own holds (its own run is no other trainer;
    releasing after a look, as a hold would need, would let go of its lock), and it holds the lock for
    a moment only, which a run that claimed the folder waits out (:data:`_CLAIMED_PATIENCE_S`).
    """
    import fcntl

    if run_dir.resolve() in _HELD:
        return None
    try:
        fd = os.open(RunLayout(run_dir).lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _pid_in(fd)
    except OSError:  # no flock on this filesystem: nothing can be known
        return None
    finally:
        os.close(fd)  # and with it the shared lock, if taken
    return None


def release_run_dir(run_dir: Path) -> None:
    """Let go of ``run_dir``'s lock if this process holds it (idempotent)."""
    fd = _HELD.pop(run_dir.resolve(), None)
    if fd is not None:
        os.close(fd)


@contextlib.contextmanager
def _writing(
    runs_root: Path, run_dir: Path, *, resuming: bool = False, existing: bool = False
) -> Iterator[None]:
    """An ``OSError`` of creating or writing ``run_dir`` as one line naming the setting to change.

    ``existing``: a new run's ``run_dir`` was there before this launch (an empty folder the user named
    with ``run_name``), so it is the user's and stays; else this launch made it.

    Raises:
        TrainerAppError: What failed, and the setting that chose the folder.
    """
    try:
        yield
    except OSError as error:
        reason = error.strerror or type(error).__name__
        if resuming:
            what = "it" if error.filename is None else str(error.filename)
            raise TrainerAppError(
                f"resume={str(run_dir)!r} is invalid: the run folder must be writable and {what} is not "
                f"({reason}); make it writable (chmod -R u+w {run_dir}), or resume into a new folder with "
                "run_name=NAME (runs_root=DIR)"
            ) from None
        blocking = next((p for p in (run_dir, *run_dir.parents) if p.exists()), None)
        if blocking is not None and not blocking.is_dir():
            named = ("run_name", run_dir.name) if blocking == run_dir else ("runs_root", str(runs_root))
            raise TrainerAppError(
                f"{named[0]}={named[1]!r} is invalid: {blocking} is a file, not a folder; choose another "
                f"{named[0]}"
            ) from None
        failed = None if error.filename is None else Path(error.filename)
        if failed is not None and (run_dir in failed.parents or (failed == run_dir and run_dir.is_dir())):
            # The run folder was there, but a run cannot write it as it would (what this launch made of
            # it is removed by now: _undone_on_failure).
            if existing:
                raise TrainerAppError(
                    f"run_name={run_dir.name!r} is invalid: the run folder {run_dir} must be writable and "
                    f"{failed} is not ({reason}); make it writable (chmod -R u+w {run_dir}), or choose "
                    "another run_name (runs_root=DIR for another folder of runs)"
                ) from None
            raise TrainerAppError(
                f"runs_root={str(runs_root)!r} is invalid: the new run folder {run_dir} must be writable and "
                f"{failed} is not ({reason}); nothing of it was kept; choose a folder you can write with "
                "runs_root=DIR"
            ) from None
        what = "" if failed is None or failed == run_dir else f"{failed}: "
        raise TrainerAppError(
            f"runs_root={str(runs_root)!r} is invalid: the run folder {run_dir} cannot be created there "
            f"({what}{reason}); choose a folder you can write with runs_root=DIR"
        ) from None


def _make_layout(run_dir: Path) -> None:
    """Create ``run_dir``'s sub-folders, then check that a run can write everything it will (no work lost)."""
    for folder in RunLayout(run_dir).folders:
        folder.mkdir(parents=True, exist_ok=True)
    _check_writable(run_dir)


def _check_writable(run_dir: Path) -> None:
    """Raise the ``OSError`` of the first place in ``run_dir`` a run would write and cannot, if any.

    A run creates files in the run folder and in each of its sub-folders (TensorBoard's event files,
    the logs, an error log, a checkpoint by its rename, a clip), and appends to or rewrites only some
    of the files already there (``RunLayout.rewritten_files``). Each folder is tried by a nameless temporary
    file, each of those files by an open for appending that writes nothing: as the run does it, since
    permission bits say nothing to root, nor of a read-only mount. Nothing else is opened: a
    checkpoint or replay file is only ever replaced by a rename, and a file of the user's (a plot)
    or an old clip is never written, so either may well be read-only. Checked when the run folder is
    taken, so that a folder a run cannot write is refused before any work starts, never after it.
    """
    import tempfile

    layout = RunLayout(run_dir)
    for folder in (layout.root, *layout.folders, layout.videos):
        if not folder.is_dir():
            continue  # made when first needed (videos/), in a folder checked here
        try:
            tempfile.TemporaryFile(dir=folder).close()
        except OSError as error:  # named by the folder, not by the temporary file's random name
            raise OSError(error.errno, error.strerror, str(folder)) from None
    for path in layout.rewritten_files():
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND))


def _claim(run_dir: Path, config_yaml: str, made: list[Path]) -> bool:
    """Create ``config.yaml`` exclusively: False when another run created it first.

    A write that fails removes what this launch made (the file, and the folders of ``made``).
    """
    try:
        file = RunLayout(run_dir).config.open("x", encoding="utf-8")
    except FileExistsError:
        return False
    except OSError:
        _remove_empty(made)
        raise
    with _undone_on_failure(run_dir, made), file:
        file.write(config_yaml)
    return True


def _taken(run_name: str, run_dir: Path) -> str:
    """The one-line refusal of a new run into ``run_dir``, which holds something already."""
    holder = _holder(run_dir)  # a live trainer's folder is that, whatever it holds yet
    if holder is not None:
        return f"run_name={run_name!r} is invalid: {_in_use(run_dir, holder)}"
    checkpoints = RunLayout(run_dir).checkpoints
    if latest_checkpoint(run_dir) is not None:
        return (
            f"run_name={run_name!r} is invalid: {run_dir} holds checkpoints already; "
            f"choose another run_name or pass resume={run_dir}"
        )
    if checkpoints.is_dir() and any(checkpoints.iterdir()):  # a replay file, best.pt: nothing to resume
        return (
            f"run_name={run_name!r} is invalid: {run_dir} holds a run that stopped before its first "
            f"checkpoint (nothing to resume); remove it (rm -r {run_dir}) to start over in it, or choose "
            "another run_name"
        )
    return (
        f"run_name={run_name!r} is invalid: {run_dir} is not empty; choose another run_name, "
        "or leave it unset for a new <task>-<time> folder"
    )


def remove_untrained_run(run_dir: Path) -> bool:
    """Remove the folder of a new run that never trained, if it holds only what a run writes before training.

    The caller knows that nothing was trained (a stop during start-up) and that the folder is this run's
    own (never a resumed run's). Only a folder whose every file is one of
    :meth:`~fastsac_async.RunLayout.written_before_training` (config, overrides, logs, TensorBoard's
    event files) is removed; anything else in it (a checkpoint, an error log, a file of the user's, a
    link) keeps it whole.

    Returns:
        Whether the folder was removed.
    """
    import shutil

    layout = RunLayout(run_dir)
    for path in run_dir.rglob("*"):
        if path.is_symlink() or not (path.is_dir() or layout.written_before_training(path)):
            return False
    shutil.rmtree(run_dir)
    return True


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint of the highest iteration in a run folder, or None when it has none.

    What counts as a checkpoint is ``fastsac_async.run_layout.checkpoint_step``'s to say (``best.pt``
    does not).
    """
    found: list[tuple[int, Path]] = []
    folder = RunLayout(run_dir).checkpoints
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
        TrainerAppError: The path does not exist, is a file that is no checkpoint (``config.yaml``), or
            is a run folder that holds no checkpoint.
    """
    path = Path(target).expanduser()
    if path.is_file():
        owner = RunLayout.holding(path)
        inside = next((p for p in (path.parent, path.parent.parent) if RunLayout(p).config.is_file()), None)
        if owner is None and inside is not None and not zipfile.is_zipfile(path):
            # A run's own file (config.yaml, a log): every checkpoint is a torch.save (zip) archive.
            raise TrainerAppError(
                f"{setting}={target!r} is invalid: it is a file of the run folder {inside}, not a "
                f"checkpoint; pass the run folder ({setting}={inside}: its latest checkpoint) or a "
                f"checkpoint file in {RunLayout(inside).checkpoints}"
            )
        return path, None if owner is None else owner.root
    if path.is_dir():
        layout = RunLayout.of_folder(path)
        latest = latest_checkpoint(layout.root)
        if latest is None:
            raise TrainerAppError(
                f"{setting}={target!r} is invalid: {layout.checkpoints} holds no model_*.pt checkpoint; "
                "pass a run folder that has saved at least one checkpoint, or a checkpoint file"
            )
        return latest, layout.root
    example = RunLayout(Path("runs/<run>"))
    raise TrainerAppError(
        f"{setting}={target!r} is invalid: no such file or folder; pass a run folder ({example.root}) "
        f"or a checkpoint file ({example.checkpoint(1000)})"
    )
