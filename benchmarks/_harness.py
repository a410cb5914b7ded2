"""What every benchmark script shares: the machine line, timing, the result table, trainer runs.

A script prints :func:`machine` first, times with :func:`timed_rate` (or its own loop where the
measured thing needs one), prints its results with :func:`report` (an aligned table; the same rows as
JSON with ``--json PATH``, see :func:`add_output_args`), and a script that measures the pipeline
launches the real trainer with :func:`run_trainer` and reads the run folder it wrote
(:class:`TrainerRun`: TensorBoard scalars, the collectors' CPUs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fastsac_async.run_layout import RunLayout

ROOT = Path(__file__).resolve().parents[1]
"""The repository root (``apps/trainer`` is launched from here)."""

Row = dict[str, object]
"""One result: column name -> value (numbers are formatted by :func:`report`)."""


def machine(*extra: str) -> str:
    """One line naming this machine: CPU model, usable and all CPUs, GPUs, Python, torch, load.

    Args:
        extra: More facts to append (a library version the figure depends on).
    """
    import torch

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(
                (line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), model
            )
    except OSError:
        pass
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    gpus = f"{count} x {torch.cuda.get_device_name(0)}" if count else "no GPU"
    load = os.getloadavg()[0]
    facts = [
        f"{model}, {len(os.sched_getaffinity(0))} of {os.cpu_count()} CPUs usable",
        gpus,
        f"Python {platform.python_version()}, torch {torch.__version__}",
        f"load avg {load:.1f}",
        *extra,
    ]
    return "machine: " + "; ".join(facts)


def timed_rate(step: Callable[[], object], seconds: float, per_step: float = 1.0) -> float:
    """Calls ``step`` for ``seconds`` (at least once) and returns ``per_step`` units per second."""
    start = time.perf_counter()
    calls = 0
    while calls == 0 or time.perf_counter() - start < seconds:
        step()
        calls += 1
    return calls * per_step / (time.perf_counter() - start)


def add_output_args(parser: argparse.ArgumentParser) -> None:
    """Adds ``--json PATH``: also write the result rows there."""
    parser.add_argument("--json", type=Path, default=None, help="also write the result rows to this file")


def report(title: str, rows: Sequence[Row], json_path: Path | None = None) -> None:
    """Prints ``rows`` as an aligned table under ``title``; with ``json_path`` appends them there too.

    The JSON file holds one object per table (``{"title", "machine", "rows"}``), a list over a script's
    tables.
    """
    columns = list(dict.fromkeys(key for row in rows for key in row))
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print(f"\n{title}")
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for r in cells:
        print("  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)), flush=True)
    if json_path is not None:
        tables = json.loads(json_path.read_text()) if json_path.exists() else []
        tables.append({"title": title, "machine": machine(), "rows": list(rows)})
        json_path.write_text(json.dumps(tables, indent=1, default=str))


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "—" if value != value else f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return "" if value is None else str(value)


Scalars = dict[str, list[tuple[float, int, float]]]
"""TensorBoard scalars of a run: tag -> [(wall time, global step, value)]."""


def read_scalars(run_dir: Path) -> Scalars:
    """Every scalar series of the TensorBoard events in ``run_dir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.wall_time, e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def launch_epoch(run_dir: Path) -> float:
    """Unix time of the run's first launch, as its config events record it (``tensorboard.launch_of``)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from fastsac_trainer.tensorboard import launch_of

    acc = EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    acc.Reload()
    return launch_of(acc)


@dataclass(frozen=True)
class TrainerRun:
    """A finished trainer run, read back from its run folder."""

    run_dir: Path
    """The run folder (``config.yaml``, ``logs/``, TensorBoard events, checkpoints)."""
    console: Path
    """The trainer's stdout and stderr."""
    wall_s: float
    """Seconds from launch to exit."""
    collector_cpus: dict[int, tuple[int, ...]]
    """Collector index -> the CPUs its process was allowed (read while it ran)."""

    def scalars(self) -> Scalars:
        """The run's TensorBoard scalars."""
        return read_scalars(self.run_dir)

    def median(self, tag: str, skip: float = 1 / 3) -> float:
        """Median of ``tag`` over its ticks after the first ``skip`` of them (boot, compile; nan if none)."""
        values = [v for _, _, v in self.scalars().get(tag, [])]
        late = values[int(len(values) * skip) :]
        return statistics.median(late) if late else float("nan")


class LaunchedTrainer:
    """A trainer process started by :func:`launch_trainer`; :meth:`wait` ends it and reads its folder.

    Args:
        cmd: The command line.
        run_dir: Its run folder.
        console: Where its stdout and stderr go.
        cpus: Pin the trainer (and so its workers, whose sizing follows the affinity) to these CPUs;
            None keeps the caller's.
        env: Extra environment variables.
    """

    def __init__(
        self,
        cmd: Sequence[str],
        run_dir: Path,
        console: Path,
        cpus: Sequence[int] | None,
        env: dict[str, str] | None,
    ) -> None:
        self.run_dir = run_dir
        self.console = console
        self.start_epoch = time.time()
        """Unix time of the launch (seconds in results count from here)."""
        self._start = time.monotonic()
        self._cpus: dict[int, tuple[int, ...]] = {}
        pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
        with console.open("w") as out:
            self._proc = subprocess.Popen(
                list(cmd), stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                preexec_fn=pin,
            )  # fmt: skip

    def wait(self, timeout_s: float) -> TrainerRun:
        """Waits for the exit (SIGTERM, then SIGKILL, ``timeout_s`` after the launch).

        Raises:
            RuntimeError: The trainer did not exit 0 (the message names its console log).
        """
        proc = self._proc
        try:
            while proc.poll() is None and time.monotonic() - self._start < timeout_s:
                self._cpus.update(_collector_cpus(RunLayout(self.run_dir).parent_log))
                time.sleep(0.5)
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        if proc.returncode != 0:
            tail = "\n".join(self.console.read_text().splitlines()[-15:])
            raise RuntimeError(
                f"the trainer exited with {proc.returncode} ({self.console}), its last lines:\n{tail}"
            )
        return TrainerRun(
            run_dir=self.run_dir, console=self.console, wall_s=time.monotonic() - self._start,
            collector_cpus=self._cpus,
        )  # fmt: skip


def launch_trainer(
    overrides: Sequence[str],
    run_name: str,
    runs_root: Path,
    cpus: Sequence[int] | None = None,
    env: dict[str, str] | None = None,
) -> LaunchedTrainer:
    """Starts ``apps/trainer`` with ``overrides`` (plain console) and returns at once.

    Args:
        overrides: Hydra overrides, as on the command line (``task=humanoid``, ``algo.agent.x=1``); of
            two for the same key the later one wins, so a script's defaults can come first.
        run_name: The run folder's name under ``runs_root`` (must not exist yet).
        runs_root: Where run folders go; the console output goes beside them (``<run_name>.console.log``).
        cpus: Pin the run to these CPUs (None: the caller's).
        env: Extra environment variables for the trainer.
    """
    runs_root.mkdir(parents=True, exist_ok=True)
    by_key = {o.split("=", 1)[0]: o for o in [*overrides, "console=plain", f"runs_root={runs_root}"]}
    cmd = [sys.executable, str(ROOT / "apps" / "trainer"), *by_key.values(), f"run_name={run_name}"]
    return LaunchedTrainer(cmd, runs_root / run_name, runs_root / f"{run_name}.console.log", cpus, env)


def run_trainer(
    overrides: Sequence[str],
    run_name: str,
    runs_root: Path,
    timeout_s: float,
    env: dict[str, str] | None = None,
) -> TrainerRun:
    """Runs ``apps/trainer`` to its end (:func:`launch_trainer`, then :meth:`LaunchedTrainer.wait`).

    Raises:
        RuntimeError: The trainer did not exit 0 (the message names its console log).
    """
    return launch_trainer(overrides, run_name, runs_root, env=env).wait(timeout_s)


_SPAWNED = re.compile(r"spawned collector(\d+) \(pid (\d+)\)")


def _collector_cpus(parent_log: Path) -> dict[int, tuple[int, ...]]:
    """The CPUs of every collector the parent's log names as spawned and that is still alive."""
    found: dict[int, tuple[int, ...]] = {}
    try:
        text = parent_log.read_text()
    except OSError:
        return found
    for index, pid in _SPAWNED.findall(text):
        with contextlib.suppress(OSError):  # gone already, or not started yet
            found[int(index)] = tuple(sorted(os.sched_getaffinity(int(pid))))
    return found
