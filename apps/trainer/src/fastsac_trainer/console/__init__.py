"""The trainer's console: the live rich panels, the plain fallback, and system metrics.

Each name loads its module on first use (``__getattr__``): the CLI wraps its output in
:class:`GuardedStream` without loading rich.
"""

from typing import TYPE_CHECKING

from fastsac_trainer._lazy import home_of, lazy_exports

if TYPE_CHECKING:
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

_HOMES = {  # the module that defines each exported name
    "fastsac_trainer.console.boot": ("BootBoard", "BootFailure", "BootView", "render_boot"),
    "fastsac_trainer.console.interrupt": ("STOP_SIGNALS", "StopRequest"),
    "fastsac_trainer.console.live": ("RichConsole",),
    "fastsac_trainer.console.panels": (
        "TABS",
        "render_overview",
        "render_system",
        "render_timing",
        "render_training",
    ),
    "fastsac_trainer.console.plain": ("PlainConsole", "snapshot_line"),
    "fastsac_trainer.console.sinks": ("ConsoleLogHandler", "FanOut", "TrainerConsole", "open_console"),
    "fastsac_trainer.console.stream": ("GuardedStream",),
    "fastsac_trainer.console.system": ("GpuSample", "SystemSample", "SystemSampler"),
}
_HOME_OF = home_of(_HOMES)
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
