"""Renderables of the training panel: the Overview, Timing and System tabs and the summary line.

Pure functions of a :class:`~fastsac_trainer.reporting.Snapshot` (and a system sample), so tests render
them into a string console of fixed width.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from rich.columns import Columns
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from fastsac_trainer.console._format import compact, duration, level_style, metric, percent_bar
from fastsac_trainer.console.system import SystemSample
from fastsac_trainer.reporting import Snapshot

__all__ = ["TABS", "eta_s", "render_overview", "render_system", "render_timing", "render_training"]

TABS = ("Overview", "Timing", "System")
"""Tab names, selected with the keys 1, 2 and 3."""

_HEADLINE = (
    ("env steps/s", "perf/env_steps_per_s", ""),
    ("updates/s", "perf/updates_per_s", ""),
    ("UTD", "async/utd", ""),
    ("replay reuse", "async/reuse", ""),
    ("learn", "perf/learn_pct", "%"),
    ("collector wait", "perf/collector_wait_pct", "%"),
    ("policy lag", "async/policy_lag", ""),
    ("ring fill", "async/ring_fill", ""),
    ("weight ver", "async/weight_version", ""),
    ("collect ms", "perf/collect_ms_per_batch", ""),
)


def eta_s(snapshot: Snapshot, first: Snapshot | None) -> float | None:
    """Seconds left, or None when unknown.

    At this run's rate since ``first`` (the first snapshot of this process), and never more than the
    launch's time limit leaves (``Snapshot.time_left_s``).
    """
    remaining = snapshot.total_env_steps - snapshot.env_steps
    if remaining <= 0:
        return 0.0
    base = first if first is not None and first is not snapshot else None
    steps = snapshot.env_steps - (base.env_steps if base else 0)
    seconds = snapshot.elapsed_s - (base.elapsed_s if base else 0.0)
    at_rate = remaining * seconds / steps if steps > 0 and seconds > 0 else None
    known = [s for s in (at_rate, snapshot.time_left_s) if s is not None]
    return min(known) if known else None


def _progress(snapshot: Snapshot, first: Snapshot | None, width: int) -> Text:
    fraction = snapshot.env_steps / snapshot.total_env_steps if snapshot.total_env_steps else 0.0
    text = Text()
    text.append(percent_bar(fraction, width), style="cyan")
    text.append(f" {100 * fraction:5.1f}%  it {snapshot.iteration}  ")
    text.append(f"{compact(snapshot.env_steps)}/{compact(snapshot.total_env_steps)} steps  ")
    text.append(f"elapsed {duration(snapshot.elapsed_s)}  ~left {duration(eta_s(snapshot, first))}")
    return text


def _grid(rows: list[tuple[str, str]], title: str) -> Panel:
    table = Table.grid(padding=(0, 1))
    table.add_column(style="dim")
    table.add_column(justify="right")
    for name, value in rows:
        table.add_row(name, value)
    return Panel(table, title=title, border_style="blue")


def render_overview(snapshot: Snapshot, first: Snapshot | None = None) -> RenderableType:
    """Progress and ETA, returns (the last evaluation's too), throughput, lag, ring fill, training metrics."""
    s = snapshot.scalars
    episodes = [
        ("mean return", compact(s.get("rollout/mean_return"))),
        ("mean ep len", compact(s.get("rollout/mean_ep_len"))),
    ]
    if snapshot.last_eval is not None:
        e = snapshot.last_eval
        episodes += [("eval return", f"{compact(e.mean_return)} @ {compact(e.env_steps)}"),
                     ("best eval", compact(e.best_return))]  # fmt: skip
    speed = [(label, metric(key, s.get(key)) + unit) for label, key, unit in _HEADLINE if key in s]
    if snapshot.warming_up:
        speed.insert(0, ("status", "warming up"))
    train = [
        (key.removeprefix("train/"), compact(v)) for key, v in sorted(s.items()) if key.startswith("train/")
    ]
    cards: list[RenderableType] = [_grid(episodes, "Episodes"), _grid(speed or [("", "-")], "Throughput")]
    if train:
        cards.append(_grid(train, "Training"))
    return Group(_progress(snapshot, first, 30), Columns(cards, equal=False, expand=False))


def _stage_tree(group: str, stages: Mapping[str, float]) -> Tree:
    """STAGE / MEAN / SHARE tree: dotted paths nest, shares are of the group's top-level total."""
    total = sum(ms for path, ms in stages.items() if "." not in path) or 1.0
    tree = Tree(Text(f"{group}  (STAGE  MEAN ms  SHARE)", style="bold"))
    nodes: dict[str, Tree] = {}
    for path in sorted(stages):
        parent_path, _, leaf = path.rpartition(".")
        parent = nodes.get(parent_path, tree)
        ms = stages[path]
        pad = max(18 - 4 * path.count("."), len(leaf) + 1)  # keeps the columns aligned across depths
        label = Text(f"{leaf:<{pad}}{ms:9.3f}  {100 * ms / total:5.1f}%")
        nodes[path] = parent.add(label)
    return tree


def render_timing(snapshot: Snapshot) -> RenderableType:
    """One stage tree per worker group (collectors, learners, or the synchronous loop)."""
    if not snapshot.timing:
        return Text("no timing reported yet", style="dim")
    return Columns([_stage_tree(group, stages) for group, stages in sorted(snapshot.timing.items())])


def render_system(sample: SystemSample | None) -> RenderableType:
    """Per-core CPU bars labelled with the real core ids, RAM, and a per-GPU table (when any)."""
    if sample is None:
        return Text("sampling…", style="dim")
    cpus = Table.grid(padding=(0, 1))
    for _ in range(2):
        cpus.add_column(justify="right", style="dim")
        cpus.add_column()
        cpus.add_column(justify="right")
    cells: list[RenderableType] = []
    for cpu, pct in zip(sample.cpu_ids, sample.per_cpu_pct, strict=False):
        cells += [f"cpu{cpu}", Text(percent_bar(pct / 100, 12), style=level_style(pct)), f"{pct:3.0f}%"]
    for start in range(0, len(cells), 6):
        row = cells[start : start + 6]
        cpus.add_row(*(row + [""] * (6 - len(row))))
    ram = Text(
        f"RAM {compact(sample.ram_used_bytes)}B / {compact(sample.ram_total_bytes)}B ({sample.ram_pct:.0f}%)",
        style=level_style(sample.ram_pct),
    )
    parts: list[RenderableType] = [Panel(cpus, title=f"CPU {sample.cpu_pct:.0f}%", border_style="blue"), ram]
    if sample.gpus:
        gpus = Table(show_edge=False)
        for column in ("gpu", "name", "util", "VRAM", ""):
            gpus.add_column(column)
        for gpu in sample.gpus:
            mem_pct = 100 * gpu.mem_used_bytes / gpu.mem_total_bytes if gpu.mem_total_bytes else 0.0
            gpus.add_row(
                str(gpu.index),
                gpu.name,
                Text(f"{gpu.util_pct:.0f}%", style=level_style(gpu.util_pct)),
                f"{compact(gpu.mem_used_bytes)}B/{compact(gpu.mem_total_bytes)}B",
                Text(percent_bar(mem_pct / 100, 12), style=level_style(mem_pct)),
            )
        parts.append(gpus)
    else:
        parts.append(Text("no GPU visible (NVML unavailable)", style="dim"))
    return Group(*parts)


def render_training(
    snapshot: Snapshot | None,
    *,
    tab: int,
    title: str,
    first: Snapshot | None = None,
    system: SystemSample | None = None,
    last_checkpoint: Path | None = None,
) -> RenderableType:
    """The whole training panel: tab bar, the selected tab (0, 1 or 2), and the checkpoint line."""
    bar = Text()
    for index, name in enumerate(TABS):
        style = "bold reverse" if index == tab else "dim"
        bar.append(f" {index + 1} {name} ", style=style)
        bar.append(" ")
    if snapshot is None:
        body: RenderableType = Text("waiting for the first report…", style="dim")
    elif tab == 1:
        body = render_timing(snapshot)
    elif tab == 2:
        body = render_system(system)
    else:
        body = render_overview(snapshot, first)
    parts: list[RenderableType] = [bar, body]
    if last_checkpoint is not None:
        parts.append(Text(f"✓ saved checkpoint {last_checkpoint}", style="green"))
    return Panel(Group(*parts), title=title, border_style="cyan")
