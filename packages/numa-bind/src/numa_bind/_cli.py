"""``numa-bind show``: the host's NUMA nodes, CPUs, memory and GPU locality as a table."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from numa_bind._bind import binding_supported, current_mempolicy
from numa_bind._cpulist import format_cpulist
from numa_bind._layout import HostLayout
from numa_bind._sysfs import discover_host

__all__ = ["main", "render_layout"]


def _gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB" if size else "none"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[col]) for row in [header, *rows]) for col in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def render_layout(layout: HostLayout) -> str:
    """Format a host layout as fixed-width tables (nodes, then GPUs)."""
    lines = _table(
        ("node", "cpus", "allowed cpus", "memory"),
        [
            (
                str(node.id),
                format_cpulist(node.cpus) or "-",
                format_cpulist(layout.allowed_cpus_of(node.id)) or "-",
                _gib(node.memory_bytes),
            )
            for node in layout.nodes
        ],
    )
    lines.append(f"allowed cpus: {format_cpulist(layout.allowed_cpus) or '-'}")
    lines.append("")
    if layout.gpus:
        lines += _table(
            ("cuda", "pci bus id", "node", "local cpus", "source"),
            [
                (
                    str(gpu.cuda_index),
                    gpu.pci_bus_id or "?",
                    "unknown" if gpu.numa_node is None else str(gpu.numa_node),
                    "?" if gpu.local_cpus is None else format_cpulist(gpu.local_cpus),
                    gpu.source,
                )
                for gpu in layout.gpus
            ],
        )
    else:
        lines.append("gpus: none visible (no NVML, no driver, or CUDA_VISIBLE_DEVICES hides them)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``numa-bind`` command."""
    parser = argparse.ArgumentParser(
        prog="numa-bind", description="Show the host's NUMA nodes, CPUs, memory and GPU locality."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser("show", help="print NUMA nodes, CPUs, memory and GPU locality")
    show.add_argument("--sysfs-root", default=None, help="where sysfs is mounted (default: /sys)")
    show.add_argument("--no-gpus", action="store_true", help="skip the NVML/sysfs GPU locality query")
    args = parser.parse_args(argv)
    # A root given that holds no sysfs is a mistake; the default /sys may be missing (macOS, sandboxes),
    # where discover_host falls back to what the OS says.
    if args.sysfs_root is not None and not (Path(args.sysfs_root) / "devices" / "system").is_dir():
        parser.error(f"--sysfs-root {args.sysfs_root} holds no devices/system; give where sysfs is mounted")
    root = "/sys" if args.sysfs_root is None else args.sysfs_root
    layout = discover_host(sysfs_root=root, with_gpus=not args.no_gpus)
    policy = current_mempolicy()
    try:
        print(render_layout(layout))  # noqa: T201
        print(  # noqa: T201
            f"binding supported: {'yes' if binding_supported() else 'no'}; "
            f"memory policy: {policy.mode} {format_cpulist(policy.nodes)}".rstrip()
        )
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader (``| head``) went away: not an error of ours. Point stdout at devnull so the
        # interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
