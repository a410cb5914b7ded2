"""Command line entry point of the trainer (``uv run trainer``)."""

from __future__ import annotations

import sys

__all__ = ["main"]

_HELP = """usage: trainer [task=NAME] [key=value ...]

FastSAC trainer. The full CLI (hydra configuration, tasks, live console) is being built;
this entry point currently only prints this help.
"""


def main(argv: list[str] | None = None) -> None:
    """Run the trainer CLI."""
    args = sys.argv[1:] if argv is None else argv
    sys.stdout.write(_HELP)
    raise SystemExit(0 if (not args or args[0] in {"-h", "--help"}) else 2)
