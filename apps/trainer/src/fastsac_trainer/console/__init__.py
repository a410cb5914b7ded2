"""The trainer's console: the live rich panels, the plain fallback, and system metrics."""

from fastsac_trainer.console.boot import BootBoard, BootFailure, BootView, render_boot
from fastsac_trainer.console.interrupt import STOP_SIGNALS, StopRequest
from fastsac_trainer.console.live import RichConsole
from fastsac_trainer.console.panels import (
    TABS,
    render_overview,
    render_system,
    render_timing,
    render_training,
)
from fastsac_trainer.console.plain import PlainConsole, snapshot_line
from fastsac_trainer.console.sinks import ConsoleLogHandler, FanOut, TrainerConsole, open_console
from fastsac_trainer.console.stream import GuardedStream
from fastsac_trainer.console.system import GpuSample, SystemSample, SystemSampler

__all__ = [  # noqa: RUF022 - grouped by topic, sorted within each group
    # Consoles (each is a Reporter and a BootView)
    "ConsoleLogHandler",
    "FanOut",
    "PlainConsole",
    "RichConsole",
    "TrainerConsole",
    "open_console",
    # Stopping and output that outlives its reader
    "STOP_SIGNALS",
    "GuardedStream",
    "StopRequest",
    # Boot
    "BootBoard",
    "BootFailure",
    "BootView",
    "render_boot",
    # Panels
    "TABS",
    "render_overview",
    "render_system",
    "render_timing",
    "render_training",
    "snapshot_line",
    # System metrics
    "GpuSample",
    "SystemSample",
    "SystemSampler",
]
