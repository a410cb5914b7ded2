"""The run folder's layout: the one place that names a file or folder inside ``runs/<run>/``.

Every writer and reader of a run folder (the workers, the parent, the app's trainers, ``trainer
eval``, the loggers, the tests) asks :class:`RunLayout` for a path; no other module spells these
names::

    runs/<run>/
        config.yaml                       the resolved configuration (claimed exclusively by a new run)
        overrides.txt                     the run's overrides (a resume starts from them)
        logs/<worker>.log                 stdout, stderr and logging of each worker process
        logs/trainer.log                  the parent's log records and console lines
        async_errors/<worker>_error.log   the traceback of a worker that died
        checkpoints/model_<gstep:07d>.pt  the checkpoint of a global step (what a resume reads)
        checkpoints/best.pt               the policy of the best evaluation so far (a policy checkpoint)
        checkpoints/replay_rank<r>.pt     learner rank r's replay buffer (the latest complete snapshot)
        checkpoints/.<name>.<random>.tmp  a checkpoint or replay write cut short (never read; below)
        videos/eval_<gstep:07d>.mp4, .gif the clip of an evaluation; videos/<checkpoint>.mp4 of trainer eval
        events.out.tfevents.*             TensorBoard's event files, in the run folder itself
        wandb_id.txt, wandb/              the W&B run's id (a resume continues it) and W&B's own files
        ddp_rendezvous                    the learners' torch.distributed file rendezvous (during a run)
        run.lock                          the lock a trainer holds on its run folder while it runs
        host<R>/                          the run folder of host R > 0 of a run across hosts (same layout)

A checkpoint is written atomically by ``fastsac_core.save_checkpoint`` (any path, in a run folder or
not), a replay file by ``fastsac_core.save_replay``: into a hidden temporary file beside it, then
renamed. A killed writer leaves that file, which
:func:`checkpoint_step` never reads as a checkpoint and ``fastsac_core.discard_partial_checkpoints``
removes from :attr:`RunLayout.checkpoints`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RunLayout", "checkpoint_step"]

_CHECKPOINT_NAME = re.compile(r"model_(\d+)\.pt")
"""The names :meth:`RunLayout.checkpoint` gives, read back by :func:`checkpoint_step`."""


_BOOT_PROFILE = ".boot.prof"
"""How :meth:`RunLayout.boot_profile` names end; :meth:`RunLayout.written_before_training` reads it."""


@dataclass(frozen=True)
class RunLayout:
    """Every path of the run folder ``root`` (``runs/<run>``); a pure value, it touches no file."""

    root: Path
    """The run folder."""

    @classmethod
    def holding(cls, checkpoint: Path) -> RunLayout | None:
        """The run whose ``checkpoints/`` holds the file ``checkpoint``, or None.

        None for a checkpoint outside a run's ``checkpoints/`` folder (a copy, a download), or in a
        folder of that name without a ``config.yaml`` beside it.
        """
        layout = cls(checkpoint.parent.parent)
        return layout if checkpoint.parent == layout.checkpoints and layout.config.is_file() else None

    @classmethod
    def of_folder(cls, folder: Path) -> RunLayout:
        """The run of ``folder``: the run folder itself, or its ``checkpoints/`` folder."""
        return cls(folder.parent) if cls(folder.parent).checkpoints == folder else cls(folder)

    @property
    def config(self) -> Path:
        """``config.yaml``: the resolved configuration (what ``--cfg job`` prints)."""
        return self.root / "config.yaml"

    @property
    def overrides(self) -> Path:
        """``overrides.txt``: the run's merged overrides, one a line (a resume starts from them)."""
        return self.root / "overrides.txt"

    @property
    def logs(self) -> Path:
        """``logs/``: the workers' and the parent's logs."""
        return self.root / "logs"

    def log(self, worker: str) -> Path:
        """``logs/<worker>.log``: stdout, stderr and logging of worker ``worker``."""
        return self.logs / f"{worker}.log"

    def boot_profile(self, worker: str) -> Path:
        """``logs/<worker>.boot.prof``: worker ``worker``'s start-up under cProfile (FASTSAC_PROFILE_BOOT)."""
        return self.logs / f"{worker}{_BOOT_PROFILE}"

    @property
    def parent_log(self) -> Path:
        """``logs/trainer.log``: the parent's log records and every console line."""
        return self.log("trainer")

    @property
    def lock(self) -> Path:
        """``run.lock``: the file a trainer holds locked (``flock``) on its run folder while it runs."""
        return self.root / "run.lock"

    @property
    def errors(self) -> Path:
        """``async_errors/``: the tracebacks of workers that died."""
        return self.root / "async_errors"

    def error_log(self, worker: str) -> Path:
        """``async_errors/<worker>_error.log``: the traceback of worker ``worker``, if it died."""
        return self.errors / f"{worker}_error.log"

    @property
    def checkpoints(self) -> Path:
        """``checkpoints/``: the checkpoints of the run (and ``best.pt``)."""
        return self.root / "checkpoints"

    def checkpoint(self, gstep: int) -> Path:
        """``checkpoints/model_{gstep:07d}.pt``: the checkpoint of global step ``gstep``.

        The one naming of checkpoints: the engine's learner and the app's synchronous trainer write
        it, :func:`checkpoint_step` reads it back.
        """
        return self.checkpoints / f"model_{gstep:07d}.pt"

    @property
    def best_checkpoint(self) -> Path:
        """``checkpoints/best.pt``: the policy of the best evaluation so far (a policy checkpoint)."""
        return self.checkpoints / "best.pt"

    def replay(self, rank: int) -> Path:
        """``checkpoints/replay_rank{rank}.pt``: learner rank ``rank``'s replay buffer (Note [replay file]).

        Rank ``rank`` is the run-wide learner rank (the synchronous trainer's is 0); one file per rank,
        replaced whole at each write, read by a resume of the run's checkpoints.
        """
        return self.checkpoints / f"replay_rank{rank}.pt"

    @property
    def videos(self) -> Path:
        """``videos/``: clips of evaluations and of ``trainer eval``."""
        return self.root / "videos"

    def video(self, name: str) -> Path:
        """``videos/<name>.mp4`` (``trainer eval`` names it after the checkpoint)."""
        return self.videos / f"{name}.mp4"

    def eval_clip(self, gstep: int) -> Path:
        """``videos/eval_{gstep:07d}.mp4``: the clip of the evaluation of the weights published at ``gstep``.

        The recorder writes a GIF of the same clip beside it (``.gif``, what TensorBoard shows).
        """
        return self.video(f"eval_{gstep:07d}")

    @property
    def events(self) -> Path:
        """The folder of TensorBoard's event files (``events.out.tfevents.*``): the run folder itself."""
        return self.root

    @property
    def wandb_id(self) -> Path:
        """``wandb_id.txt``: the id of the run's W&B run, so a resume continues it."""
        return self.root / "wandb_id.txt"

    @property
    def wandb_files(self) -> Path:
        """``wandb/``: W&B's own files (W&B names it, in the folder it is given: the run folder)."""
        return self.root / "wandb"

    @property
    def rendezvous(self) -> Path:
        """``ddp_rendezvous``: the learners' torch.distributed file rendezvous (a stale one is removed)."""
        return self.root / "ddp_rendezvous"

    def host(self, rank: int) -> RunLayout:
        """``host<rank>/``: the run folder of host ``rank`` (> 0) of a run across hosts, in host 0's."""
        return RunLayout(self.root / f"host{rank}")

    @property
    def folders(self) -> tuple[Path, ...]:
        """The sub-folders a run folder is made with: ``logs/``, ``async_errors/``, ``checkpoints/``."""
        return (self.logs, self.errors, self.checkpoints)

    def written_before_training(self, path: Path) -> bool:
        """Whether the file ``path`` is one a run writes before it trains, and nothing else needs.

        ``config.yaml``, ``overrides.txt``, the logs (and boot profiles), TensorBoard's event files, the
        rendezvous and the lock: a folder that holds only these (and :attr:`folders`) keeps nothing of
        a run that never trained.
        Checkpoints, replay files, error logs, videos and W&B's files are not.
        """
        return (
            path in (self.config, self.overrides, self.rendezvous, self.lock)
            or (path.parent == self.logs and (path.suffix == ".log" or path.name.endswith(_BOOT_PROFILE)))
            or (path.parent == self.events and path.name.startswith("events.out.tfevents."))
        )

    def rewritten_files(self) -> list[Path]:
        """The files already in the run folder that a launch appends to or rewrites in place.

        ``config.yaml``, ``overrides.txt``, the logs and boot profiles, ``wandb_id.txt`` and the error
        logs (a synchronous run overwrites its own). Not the checkpoints and replay files (only ever
        replaced by a rename), TensorBoard's event files (each launch starts a new one), videos or a
        user's own files: a run never opens those for writing.
        """
        found = [
            self.config,
            self.overrides,
            self.wandb_id,
            *(p for p in self.logs.glob("*") if p.suffix == ".log" or p.name.endswith(_BOOT_PROFILE)),
            *(self.errors.iterdir() if self.errors.is_dir() else ()),
        ]
        return [path for path in found if path.is_file()]


def checkpoint_step(path: Path) -> int | None:
    """The global step of a checkpoint named by :meth:`RunLayout.checkpoint`, or None for any other file.

    ``best.pt`` (a policy checkpoint), a killed write's ``.model_0000100.pt.<random>.tmp`` and other
    files in ``checkpoints/`` are not checkpoints of a step.
    """
    match = _CHECKPOINT_NAME.fullmatch(path.name)
    return int(match.group(1)) if match else None
