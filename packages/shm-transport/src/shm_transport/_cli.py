"""``shm-transport`` command: list and clean up shared-memory segments.

``shm-transport list`` prints every ``shmtx-`` (or ``$SHMTX_PREFIX``) segment with its creator pid,
size and whether the creator is alive; ``shm-transport cleanup [--dry-run]`` removes those whose
creator is dead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from shm_transport._cleanup import cleanup_stale_segments, list_segments
from shm_transport._segment import check_prefix
from shm_transport.exceptions import SegmentError

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit status."""
    parser = argparse.ArgumentParser(
        prog="shm-transport", description="List and clean up shm-transport's shared-memory segments."
    )
    parser.add_argument(
        "--prefix", default=None, help="segment name prefix (default: $SHMTX_PREFIX, else shmtx-)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list segments with their creator pid, size and liveness")
    cleanup = commands.add_parser("cleanup", help="remove segments whose creator process is dead")
    cleanup.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    args = parser.parse_args(argv)
    try:
        if args.prefix is not None:
            check_prefix(args.prefix, "--prefix")
        return _run(args)
    except SegmentError as error:  # a bad --prefix or $SHMTX_PREFIX: one line, not a traceback
        parser.error(str(error))


def _run(args: argparse.Namespace) -> int:
    out = sys.stdout
    if args.command == "list":
        segments = list_segments(prefix=args.prefix)
        out.write(f"{'name':<32} {'pid':>8} {'bytes':>14} creator\n")
        for info in segments:
            state = "alive" if info.creator_alive else "dead (stale)"
            out.write(f"{info.name:<32} {info.creator_pid:>8} {info.nbytes:>14} {state}\n")
        out.write(f"{len(segments)} segment(s)\n")
        return 0
    removed = cleanup_stale_segments(prefix=args.prefix, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for name in removed:
        out.write(f"{verb} {name}\n")
    out.write(f"{verb} {len(removed)} stale segment(s)\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
