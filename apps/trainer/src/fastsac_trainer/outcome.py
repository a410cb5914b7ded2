"""How a run ends, in words: the last line on the console and in the parent's log, and the exit codes."""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["EXIT_ABORTED", "EXIT_FAILED", "EXIT_USAGE", "final_line", "summary"]

_log = logging.getLogger("trainer")

EXIT_USAGE = 2
"""Exit code of an invalid command line or config."""
EXIT_FAILED = 1
"""Exit code of a run whose worker failed."""
EXIT_ABORTED = 130
"""Exit code after a second Ctrl+C (a run stopped at once exits with 128 + the signal number)."""


def final_line(line: str, stream: Any, code: int) -> int:
    """Write the run's last line to ``stream`` and to the parent's log; return ``code``."""
    stream.write(f"{line}\n")
    stream.flush()
    _log.log(logging.INFO if code == 0 else logging.WARNING, "%s (exit %d)", line, code)
    return code


def summary(result: object, stop: str | None = None) -> str:
    """A short line about the trainer's result, whatever shape it has; ``stop`` names the signal."""
    if result is None:
        return "training finished"
    fields = getattr(result, "__dataclass_fields__", None)
    if fields:
        values = {name: getattr(result, name) for name in fields if not name.startswith("_")}
        if stop is not None and values.get("stop_reason") == "stop_requested":
            values["stop_reason"] = stop
        elif stop is not None and values.get("stop_reason") == "stopped_during_boot":
            values["stop_reason"] = f"stopped_during_boot ({stop})"
        shown = (f"{value:.2f}" if isinstance(value, float) else value for value in values.values())
        return ", ".join(f"{name}={value}" for name, value in list(zip(values, shown, strict=True))[:6])
    return str(result)
