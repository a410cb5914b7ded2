"""``trainer plot <run> [<run> ...] [out=FILE]``: a PNG of the runs' returns from their TensorBoard events.

One row per return scalar (``rollout/mean_return``; ``eval/return`` too when a run has it), against
wall-clock time (left) and env steps (right). Runs are overlaid with their folder names. The seeds
of one command (sibling folders ``<name>_s<seed>``, see :mod:`fastsac_trainer.seeds`) are one curve: their
mean, with the band of one standard deviation around it, on the env steps (or seconds) all of them
reached.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from fastsac_trainer.config.exceptions import TrainerAppError

__all__ = ["AXES", "RETURN_TAGS", "Curve", "Series", "curves", "plot_main", "plot_runs", "read_series"]

RETURN_TAGS = ("rollout/mean_return", "eval/return")
"""The scalars plotted, one row each (a tag no run has is left out)."""
AXES = ("wall_s", "env_steps")
"""The x axes: seconds since the run's first point, and env steps (the event step)."""
_AXIS_LABELS = {"wall_s": "wall-clock (s)", "env_steps": "env steps"}
_GRID = 200
"""Points of the common x grid the seeds of a group are interpolated onto."""


@dataclass(frozen=True)
class Series:
    """One scalar of one run, as its event files hold it."""

    env_steps: np.ndarray
    """Event steps (env steps)."""
    wall_s: np.ndarray
    """Seconds since the run's first event of this scalar."""
    values: np.ndarray
    """The scalar's values."""


@dataclass(frozen=True)
class Curve:
    """What is drawn for one run or one group of seeds."""

    label: str
    """Legend label: the run folder's name, or ``<name> (n seeds)``."""
    x: np.ndarray
    """X values."""
    mean: np.ndarray
    """The run's values, or the seeds' mean."""
    std: np.ndarray
    """The seeds' standard deviation (zeros for one run)."""


def read_series(run_dir: Path, tag: str) -> Series | None:
    """``tag`` of the run in ``run_dir``, from its event files (None when it has no such scalar)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    if tag not in events.Tags()["scalars"]:
        return None
    points = events.Scalars(tag)
    wall = np.array([p.wall_time for p in points])
    return Series(
        env_steps=np.array([p.step for p in points], dtype=np.float64),
        wall_s=wall - wall[0],
        values=np.array([p.value for p in points], dtype=np.float64),
    )


def _groups(run_dirs: list[Path]) -> dict[str, list[Path]]:
    """Runs by curve: seeds ``<name>_s<seed>`` of one parent share ``<name>``; others stand alone."""
    groups: dict[str, list[Path]] = {}
    for run_dir in run_dirs:
        match = re.fullmatch(r"(.+)_s\d+", run_dir.name)
        key = str(run_dir.parent / match.group(1)) if match else str(run_dir)
        groups.setdefault(key, []).append(run_dir)
    return groups


def curves(run_dirs: list[Path], tag: str, axis: str) -> list[Curve]:
    """The curves of ``tag`` against ``axis`` (``wall_s`` or ``env_steps``) for ``run_dirs``."""
    drawn = []
    for key, members in _groups(run_dirs).items():
        found = [(s, getattr(s, axis)) for s in (read_series(m, tag) for m in members) if s is not None]
        if not found:
            continue
        if len(members) == 1:
            series, x = found[0]
            drawn.append(Curve(members[0].name, x, series.values, np.zeros_like(series.values)))
            continue
        # Seeds report at different points: compare them on the x range every seed covers.
        grid = np.linspace(max(x[0] for _, x in found), min(x[-1] for _, x in found), _GRID)
        stacked = np.stack([np.interp(grid, x, s.values) for s, x in found])
        label = f"{Path(key).name} ({len(found)} seeds)"
        drawn.append(Curve(label, grid, stacked.mean(axis=0), stacked.std(axis=0)))
    return drawn


def plot_runs(run_dirs: list[Path], out: Path) -> Path:
    """Write the PNG of ``run_dirs``' returns to ``out``; its path.

    Raises:
        TrainerAppError: No run has a return scalar yet.
    """
    rows = [(tag, [curves(run_dirs, tag, axis) for axis in AXES]) for tag in RETURN_TAGS]
    rows = [(tag, per_axis) for tag, per_axis in rows if per_axis[0]]
    if not rows:
        names = ", ".join(str(r) for r in run_dirs)
        raise TrainerAppError(
            f"run={names} has no {RETURN_TAGS[0]} yet: a run logs it once its first episodes end; "
            "plot it later or pick a run folder with TensorBoard events"
        )
    figure = Figure(figsize=(12, 4 * len(rows)), layout="constrained")
    axes = figure.subplots(len(rows), len(AXES), squeeze=False)
    for (tag, per_axis), row in zip(rows, axes, strict=True):
        for axis, drawn, ax in zip(AXES, per_axis, row, strict=True):
            for curve in drawn:
                (line,) = ax.plot(curve.x, curve.mean, label=curve.label)
                if curve.std.any():
                    low, high = curve.mean - curve.std, curve.mean + curve.std
                    ax.fill_between(curve.x, low, high, color=line.get_color(), alpha=0.25)
            ax.set_xlabel(_AXIS_LABELS[axis])
            ax.set_ylabel(tag)
            ax.grid(alpha=0.3)
            ax.legend(fontsize="small")
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=100)
    return out


def plot_main(args: list[str]) -> int:
    """``trainer plot <run> [<run> ...] [out=FILE]`` (default ``out=returns.png``)."""
    runs = [Path(a) for a in args if "=" not in a]
    options = dict(a.partition("=")[::2] for a in args if "=" in a)
    unknown = sorted(set(options) - {"out"})
    if unknown:
        raise TrainerAppError(
            f"{unknown[0]}={options[unknown[0]]!r} is not an option of `trainer plot`; use out=FILE.png"
        )
    if not runs:
        raise TrainerAppError("no run folder given: `trainer plot runs/<run> [runs/<other> ...] [out=FILE]`")
    for run in runs:
        if not run.is_dir():
            raise TrainerAppError(
                f"run={str(run)!r} is invalid: no such folder; name a run folder (runs/<run>)"
            )
    out = plot_runs(runs, Path(options.get("out", "returns.png")))
    sys.stdout.write(f"wrote {out} ({len(runs)} run(s))\n")
    return 0
