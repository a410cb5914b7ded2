"""TrainerTopology.render: a readable fixed-width table of learners, collectors and notes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastsac_topology import TrainerTopology


def test_render_lists_every_placement(
    resolve: Callable[..., TrainerTopology], host: Callable[..., Any]
) -> None:
    """Every learner and collector is one row, columns line up, CPU sets use cpulist form, notes follow."""
    plan = resolve(
        host=host([range(16), range(16, 32)], [0, 1]),
        learner_devices=["cuda:0", "cuda:1"],
        num_cuda_devices=2,
        num_learners=2,
        num_collectors=4,
        num_envs=128,
        cpus_per_collector=3,
        collector_inference_device="cpu",
        transition_ipc="on",
    )
    lines = plan.render().splitlines()
    assert lines[0].split() == ["rank", "device", "node", "cpus"]
    assert lines[1].split() == ["0", "cuda:0", "0", "0-1"]
    assert lines[2].split() == ["1", "cuda:1", "1", "16-17"]
    header = lines[4]
    assert header.split() == [
        "collector",
        "envs",
        "owner",
        "inference",
        "node",
        "cpus",
        "transitions",
        "weights",
    ]
    rows = lines[5:9]
    assert rows[2].split() == ["2", "64-95", "1", "cpu", "1", "18-20", "host", "host"]
    for column in ("owner", "node", "transitions"):
        start = header.index(column)
        assert all(row[start - 1] == " " and row[start] != " " for row in rows)
    assert lines[9:] == [f"note: {note}" for note in plan.notes]
    assert len(plan.notes) == 2
