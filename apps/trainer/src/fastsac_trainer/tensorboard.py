"""A :class:`~fastsac_trainer.reporting.Reporter` that writes TensorBoard event files into the run folder.

Scalars keep the names of ``Snapshot.scalars`` (the DESIGN names: ``perf/env_steps_per_s``,
``async/policy_lag``, ``rollout/mean_return``, ``train/qf_loss``, ...), with the env steps collected
so far as the x axis, so runs with different ``task.num_envs`` line up; the iteration (full env
batches) is the scalar ``progress/iteration``. An evaluation's ``eval/return`` and ``eval/episode_length``
go at the env steps its weights were published at, and so does its clip, if one was recorded: the GIF
beside the MP4 as the image ``eval/video`` (TensorBoard's Images tab plays it). Collector stage
timings that the trainer did not already put into ``scalars`` are added as
``perf/collector_<stage>_ms`` (mean over collectors), the way the public reference names them. The
run's config is written once per launch as text (``config``) and as hparams (dotted keys), stamped
with the launch's time (:func:`fastsac_trainer.boot_clock.launch_time`): the run's first ``config``
event is the zero of ``trainer plot``'s wall-clock axis (:func:`launch_of`).
"""

from __future__ import annotations

import io
import logging
import math
from pathlib import Path
from typing import Any

from fastsac_trainer.reporting import EvalPoint, Snapshot

__all__ = [
    "CONFIG_TAG",
    "ITERATION",
    "VIDEO_TAG",
    "TensorBoardReporter",
    "collector_stage_means",
    "eval_scalars",
    "flat_config",
    "launch_of",
    "logged_scalars",
]

_log = logging.getLogger(__name__)

ITERATION = "progress/iteration"
"""The scalar that keeps the iteration (the x axis is env steps)."""
VIDEO_TAG = "eval/video"
"""The image (an animated GIF) of an evaluation's clip."""
CONFIG_TAG = "config"
"""The text of the launch's resolved config (YAML), written with the launch's time."""
_CONFIG_EVENTS = f"{CONFIG_TAG}/text_summary"
"""The tag of the config's events in the files (``add_text`` adds the suffix)."""


def collector_stage_means(timing: dict[str, dict[str, float]]) -> dict[str, float]:
    """Mean ms of each stage over the ``collector*`` groups, keyed ``perf/collector_<stage>_ms``."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for group, stages in timing.items():
        if not group.startswith("collector"):
            continue
        for stage, ms in stages.items():
            sums[stage] = sums.get(stage, 0.0) + ms
            counts[stage] = counts.get(stage, 0) + 1
    return {f"perf/collector_{stage}_ms": sums[stage] / counts[stage] for stage in sums}


def logged_scalars(snapshot: Snapshot) -> dict[str, float]:
    """Every scalar a logger records for ``snapshot`` (TensorBoard and W&B alike), finite ones only."""
    scalars = dict(collector_stage_means(snapshot.timing))
    scalars.update(snapshot.scalars)
    scalars[ITERATION] = float(snapshot.iteration)
    return {name: value for name, value in sorted(scalars.items()) if math.isfinite(value)}


def eval_scalars(point: EvalPoint) -> dict[str, float]:
    """The scalars of one evaluation, written at ``point.env_steps`` (those of its weights)."""
    return {"eval/return": point.mean_return, "eval/episode_length": point.mean_length}


def flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, bool | int | float | str]:
    """``config`` with dotted keys and hparams-friendly values (None and lists become text)."""
    flat: dict[str, bool | int | float | str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flat_config(value, f"{name}."))
        elif isinstance(value, bool | int | float | str):
            flat[name] = value
        else:
            flat[name] = "null" if value is None else str(value)
    return flat


def launch_of(events: Any) -> float:
    """Unix time of the first launch of the run whose events ``events`` (a loaded ``EventAccumulator``) holds.

    The wall time of its first ``config`` event (written with its launch's time); a run without one (its
    events written by another tool) counts from its first event.
    """
    if _CONFIG_EVENTS in events.Tags()["tensors"]:
        return float(min(event.wall_time for event in events.Tensors(_CONFIG_EVENTS)))
    return float(events.FirstEventTimestamp())


class TensorBoardReporter:
    """Writes every snapshot's scalars as TensorBoard events, at its env step.

    Args:
        log_dir: Folder of the event files (the run folder).
        resumed_at_env_steps: The env steps of the checkpoint this launch resumes, if any:
            TensorBoard hides the events an earlier launch of the run wrote after it (that launch
            went on past its last checkpoint), and keeps the ones up to it. The event files keep
            both (Note [TensorBoard across a resume]).
        config: The resolved config, written as text and hparams (None: not written).
        launched: Unix time of this launch, the time the config events carry (None:
            :func:`fastsac_trainer.boot_clock.launch_time`).
    """

    def __init__(
        self,
        log_dir: Path,
        resumed_at_env_steps: int | None = None,
        config: dict[str, Any] | None = None,
        launched: float | None = None,
    ) -> None:
        # Note [TensorBoard across a resume]: each launch starts with a SessionLog START at its purge
        # step (0 for the first). Readers hide the points of earlier launches at or past a later
        # START's step: `trainer plot` (EventAccumulator) at every START, TensorBoard's Python loader
        # (--load_fast=false) at every START but a run's first (hence one for the first launch too),
        # and its fast loader (the default) at any step that goes back, START or not.
        from torch.utils.tensorboard import SummaryWriter  # torch: only where a writer is made

        purge_step = 0 if resumed_at_env_steps is None else resumed_at_env_steps + 1
        self._writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)
        if config is not None:
            if launched is None:
                from fastsac_trainer.boot_clock import launch_time

                launched = launch_time()
            self._write_config(config, resumed_at_env_steps or 0, launched)

    def _write_config(self, config: dict[str, Any], step: int, launched: float) -> None:
        from omegaconf import OmegaConf
        from torch.utils.tensorboard.summary import hparams

        text = OmegaConf.to_yaml(OmegaConf.create(config))
        self._writer.add_text(CONFIG_TAG, f"```yaml\n{text}```", step, walltime=launched)
        file_writer = self._writer._get_file_writer()  # type: ignore[no-untyped-call]
        metrics = {"rollout/mean_return": float("nan")}  # the scalar the HParams tab shows per run
        for summary in hparams(flat_config(config), metrics):  # type: ignore[no-untyped-call]
            file_writer.add_summary(summary, step, walltime=launched)

    def report(self, snapshot: Snapshot) -> None:
        """Write the snapshot's scalars at ``snapshot.env_steps``."""
        for name, value in logged_scalars(snapshot).items():
            self._writer.add_scalar(name, value, snapshot.env_steps)
        self._writer.flush()

    def evaluated(self, point: EvalPoint) -> None:
        """Write the evaluation's scalars, and its clip if it has one, at ``point.env_steps``."""
        for name, value in eval_scalars(point).items():
            self._writer.add_scalar(name, value, point.env_steps)
        if point.video is not None:
            self._add_clip(point.video.with_suffix(".gif"), point.env_steps)
        self._writer.flush()

    def _add_clip(self, gif: Path, step: int) -> None:
        """The GIF ``gif`` as the image :data:`VIDEO_TAG` at ``step`` (what ``add_video`` writes)."""
        from PIL import Image
        from tensorboard.compat.proto.summary_pb2 import Summary

        try:
            encoded = gif.read_bytes()
        except FileNotFoundError:
            _log.warning("no GIF of the clip %s to show in TensorBoard", gif.with_suffix(".mp4"))
            return
        with Image.open(io.BytesIO(encoded)) as image:  # the bytes read once: the size from them too
            width, height = image.size
        picture = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=encoded)
        summary = Summary(value=[Summary.Value(tag=VIDEO_TAG, image=picture)])
        self._writer._get_file_writer().add_summary(summary, step)  # type: ignore[no-untyped-call]

    def checkpoint_saved(self, path: Path) -> None:
        """Nothing to record for a checkpoint."""

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()
