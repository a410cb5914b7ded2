"""``trainer plot <run> [<run> ...] [out=FILE]``: a PNG of the runs' returns from their TensorBoard events.

One row per return scalar (``rollout/mean_return``; ``eval/return`` too when a run has it), against
wall-clock seconds since the run's launch (left; every row of a run counts from that one zero, its
first launch's: :func:`fastsac_trainer.tensorboard.launch_of`) and env steps (right). Runs are
overlaid with their folder names. The seeds of one command (sibling folders ``<name>_s<seed>``, see
:mod:`fastsac_trainer.seeds`) are one colour: their mean, with the band of one standard deviation
around it, wherever at least two seeds have points, and a seed's own line where it is alone (one
stopped early, or the wall-clock spans differ). Each seed counts only within its own x range (linear
between its points, never extrapolated), and only in the rows of the scalars it has; the legend
says how many seeds each part averages.
"""

from __future__ import annotations

import itertools
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib import rcParams
from matplotlib.figure import Figure

from fastsac_trainer.commands import PLOT, parse
from fastsac_trainer.config.exceptions import TrainerAppError

__all__ = [
    "AXES",
    "RETURN_TAGS",
    "Curve",
    "Series",
    "curves",
    "draw_runs",
    "plot_main",
    "plot_runs",
    "read_series",
]

RETURN_TAGS = ("rollout/mean_return", "eval/return")
DEFAULT_OUT = "returns.png"
"""The image's name without ``out=``: in the (first) run folder, never the current folder."""
"""The scalars plotted, one row each (a tag no run has is left out)."""
AXES = ("wall_s", "env_steps")
"""The x axes: seconds since the run's launch, and env steps (the event step)."""
_AXIS_LABELS = {"wall_s": "wall-clock since launch (s)", "env_steps": "env steps"}
_GRID = 200
"""Points of the common x grid the seeds of a group are interpolated onto (over the group's whole span)."""


@dataclass(frozen=True)
class Series:
    """One scalar of one run, as its event files hold it."""

    env_steps: np.ndarray
    """Event steps (env steps)."""
    wall_s: np.ndarray
    """Seconds since the run's (first) launch."""
    values: np.ndarray
    """The scalar's values."""


@dataclass(frozen=True)
class Curve:
    """What is drawn for one run, or for one part of a group of seeds."""

    label: str
    """Legend label: the run folder's name, ``<name> (mean of n seeds)``, or ``<name>: <seed> alone``."""
    group: str
    """The run folder, or the seeds' shared ``<parent>/<name>``: one colour each."""
    x: np.ndarray
    """X values."""
    mean: np.ndarray
    """The run's values, or the mean of the seeds that have points there."""
    std: np.ndarray
    """The seeds' standard deviation (zeros for one run or one seed)."""
    seeds: int
    """How many seeds the points average (1: a single run, or a seed alone)."""
    runs: int
    """How many of the group's runs have this scalar: what ``seeds`` is out of (1 for a single run)."""


def read_series(run_dir: Path, tag: str) -> Series | None:
    """``tag`` of the run in ``run_dir``, from its event files (None when it has no such scalar)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from fastsac_async import RunLayout
    from fastsac_trainer.tensorboard import launch_of

    events = EventAccumulator(str(RunLayout(run_dir).events), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    if tag not in events.Tags()["scalars"]:
        return None
    points = events.Scalars(tag)
    wall = np.array([p.wall_time for p in points])
    return Series(
        env_steps=np.array([p.step for p in points], dtype=np.float64),
        wall_s=wall - launch_of(events),
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


def _seed_parts(key: str, found: list[tuple[str, np.ndarray, np.ndarray]]) -> list[Curve]:
    """The parts of a group of seeds ``(seed run, x, values)``: a mean where several have points, else one.

    The group's x span is cut at every seed's first and last x; consecutive pieces covered by the
    same seeds are one part. A seed covers a piece only within its own range, so nothing is
    extrapolated; pieces no seed covers (between seeds that do not overlap) are left out.
    """
    spans = [(float(x[0]), float(x[-1])) for _, x, _ in found]
    edges = np.unique(np.array(spans))
    parts: list[tuple[float, float, tuple[int, ...]]] = []
    for lo, hi in itertools.pairwise(edges.tolist()):
        members = tuple(i for i, (first, last) in enumerate(spans) if first <= lo and hi <= last)
        if parts and parts[-1][2] == members:
            parts[-1] = (parts[-1][0], hi, members)
        else:
            parts.append((lo, hi, members))
    span = edges[-1] - edges[0]
    name = Path(key).name
    drawn = []
    for lo, hi, members in parts:
        if len(members) == 1:
            seed, x, values = found[members[0]]
            xs = np.concatenate([[lo], x[(x > lo) & (x < hi)], [hi]])  # its own points, cut at the part
            ys = np.interp(xs, x, values)
            drawn.append(Curve(f"{name}: {seed} alone", key, xs, ys, np.zeros_like(ys), 1, len(found)))
        elif members:
            grid = np.linspace(lo, hi, max(2, math.ceil(_GRID * (hi - lo) / span)))
            stacked = np.stack([np.interp(grid, found[i][1], found[i][2]) for i in members])
            label = f"{name} (mean of {len(members)} seeds)"
            mean, std = stacked.mean(axis=0), stacked.std(axis=0)
            drawn.append(Curve(label, key, grid, mean, std, len(members), len(found)))
    return drawn


def curves(run_dirs: list[Path], tag: str, axis: str) -> list[Curve]:
    """The curves of ``tag`` against ``axis`` (``wall_s`` or ``env_steps``) for ``run_dirs``.

    A group counts only its runs that have ``tag``: a group of seeds of which one has it is that run.
    """
    drawn = []
    for key, members in _groups(run_dirs).items():
        found = []
        for member in members:
            series = read_series(member, tag)
            if series is not None:
                x = getattr(series, axis)
                order = np.argsort(x, kind="stable")
                found.append((member.name, x[order], series.values[order]))
        if len(found) == 1:
            run, x, values = found[0]
            drawn.append(Curve(run, key, x, values, np.zeros_like(values), 1, 1))
        elif found:
            drawn.extend(_seed_parts(key, found))
    return drawn


def _style(curve: Curve) -> str:
    """Solid: a run, or the mean of all its group's seeds with the scalar; dashed: fewer; dotted: one seed."""
    if curve.seeds == curve.runs:
        return "-"
    return "--" if curve.seeds > 1 else ":"


def draw_runs(run_dirs: list[Path]) -> Figure:
    """The figure of ``run_dirs``' returns: one row per return scalar, one column per x axis.

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
    groups = _groups(run_dirs)
    palette = rcParams["axes.prop_cycle"].by_key()["color"]
    colours = {key: palette[i % len(palette)] for i, key in enumerate(groups)}
    figure = Figure(figsize=(12, 4 * len(rows)), layout="constrained")
    axes = figure.subplots(len(rows), len(AXES), squeeze=False)
    for (tag, per_axis), row in zip(rows, axes, strict=True):
        for axis, drawn, ax in zip(AXES, per_axis, row, strict=True):
            labelled: set[str] = set()
            for curve in drawn:
                colour = colours[curve.group]
                label = curve.label if curve.label not in labelled else "_nolegend_"
                labelled.add(curve.label)
                style = _style(curve)
                ax.plot(curve.x, curve.mean, style, color=colour, label=label)
                if curve.seeds > 1:
                    low, high = curve.mean - curve.std, curve.mean + curve.std
                    ax.fill_between(curve.x, low, high, color=colour, alpha=0.25)
            ax.set_xlabel(_AXIS_LABELS[axis])
            ax.set_ylabel(tag)
            ax.grid(alpha=0.3)
            ax.legend(fontsize="small")
    return figure


def plot_runs(run_dirs: list[Path], out: Path) -> Path:
    """Write the PNG of ``run_dirs``' returns (:func:`draw_runs`) to ``out``; its path.

    Raises:
        TrainerAppError: No run has a return scalar yet.
    """
    out = image_file(str(out))
    figure = draw_runs(run_dirs)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(out, dpi=100)
    except OSError as error:
        raise TrainerAppError(
            f"out={str(out)!r} is invalid: it cannot be written ({error.strerror or error}); choose a file "
            "in a folder you can write, e.g. out=returns.png"
        ) from None
    return out


def image_file(out: str) -> Path:
    """``out=`` as the path of an image matplotlib writes.

    Its format comes from the suffix (none: ``.png``); an existing folder gets :data:`DEFAULT_OUT` in it.

    Raises:
        TrainerAppError: matplotlib writes no such format.
    """
    from matplotlib.backend_bases import FigureCanvasBase

    path = Path(out)
    if path.is_dir():  # a folder: the default name inside it, not "<folder>.png" beside it
        return path / DEFAULT_OUT
    if not path.suffix:
        return path.with_suffix(".png")  # what savefig would write
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix[1:].lower() not in formats:
        raise TrainerAppError(
            f"out={out!r} is invalid: matplotlib writes no {path.suffix} files; end it in .png, or one of "
            f"{', '.join(f'.{f}' for f in sorted(formats))}"
        )
    return path


def plot_main(args: list[str]) -> int:
    """``trainer plot <run> [<run> ...] [out=FILE]`` (default: ``returns.png`` in the first run folder)."""
    parsed = parse(args, PLOT)
    runs, options = [Path(a) for a in parsed.positional], parsed.options
    image_file(options.get("out", DEFAULT_OUT))  # before the events are read
    for run in runs:
        if not run.is_dir():
            raise TrainerAppError(
                f"run={str(run)!r} is invalid: no such folder; name a run folder (runs/<run>)"
            )
    out = plot_runs(runs, Path(options["out"]) if "out" in options else runs[0] / DEFAULT_OUT)
    sys.stdout.write(f"wrote {out} ({len(runs)} run(s))\n")
    return 0
