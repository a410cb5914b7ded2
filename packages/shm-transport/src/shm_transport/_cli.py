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

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit status."""
    parser = argparse.ArgumentParser(
        prog="shm-transport", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument(
        "--prefix", default=None, help="segment name prefix (default: $SHMTX_PREFIX, else shmtx-)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list segments with their creator pid, size and liveness")
    cleanup = commands.add_parser("cleanup", help="remove segments whose creator process is dead")
    cleanup.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    args = parser.parse_args(argv)
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
