"""Automatic collector sizing (Note [automatic collector sizing]): counts that fit the host."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fastsac_topology import AUTO, TopologyError, resolve_trainer_topology, size_collectors
from numa_bind import HostLayout

from .conftest import DEFAULTS

Host = Callable[..., HostLayout]


def _size(host: HostLayout, **kw: Any) -> Any:
    args: dict[str, Any] = dict(num_envs=448, envs_fixed=False, devices=["cuda:0"], host=host, quota=None,
                                num_collectors=AUTO, cpus_per_collector=AUTO)  # fmt: skip
    args.update(kw)
    return size_collectors(**args)


def test_the_headline_host_gets_one_collector_per_cpu_the_learner_leaves(
    host: Callable[..., HostLayout],
) -> None:
    """16 CPUs, one GPU learner keeping 2: 14 collectors of 1 CPU, 448 envs kept, and the plan says why."""
    sizing = _size(host([range(16)], [0]))
    assert (sizing.num_collectors, sizing.cpus_per_collector, sizing.num_envs) == (14, 1, 448)
    assert (
        sizing.reason == "auto: 14 collectors, 1 CPU each: 16 usable CPUs (affinity 16), 2 for the learner(s)"
    )


def test_the_affinity_and_the_cgroup_quota_bound_the_count(host: Host) -> None:
    """Only the CPUs this process may use count: its affinity, then its cgroup quota."""
    assert _size(host([range(16)], [0], allowed=range(8))).num_collectors == 6
    quota = _size(host([range(16)], [0]), quota=4.5)
    assert quota.num_collectors == 2 and "cgroup quota 4.5" in quota.reason


def test_num_envs_moves_to_the_nearest_multiple_unless_it_was_set(host: Host) -> None:
    """30 collector CPUs: 448 envs become 450; a num_envs the user set keeps 448 with 28 collectors."""
    wide = host([range(32)], [0])
    moved = _size(wide)
    assert (moved.num_collectors, moved.num_envs) == (30, 450)
    assert "task.num_envs 448->450 (divisible by 30 collectors)" in moved.reason
    kept = _size(wide, envs_fixed=True)
    assert (kept.num_collectors, kept.num_envs, kept.cpus_per_collector) == (28, 448, 1)


def test_few_envs_are_never_spread_thinner_than_one_env_per_collector(
    host: Callable[..., HostLayout],
) -> None:
    """A 4-env task on 16 CPUs: 4 collectors of one env each, num_envs unchanged."""
    sizing = _size(host([range(16)], [0]), num_envs=4)
    assert (sizing.num_collectors, sizing.num_envs) == (4, 4)


def test_a_cpu_learner_keeps_half_the_cpus_and_its_collectors_are_unpinned(host: Host) -> None:
    """On CPU: 2 CPUs give 1 collector (the 2-core laptop), 16 give 8; none pinned."""
    small = _size(host([range(2)]), devices=["cpu"], num_envs=32)
    assert (small.num_collectors, small.cpus_per_collector) == (1, None)
    assert "unpinned" in small.reason
    assert _size(host([range(16)]), devices=["cpu"], num_envs=32).num_collectors == 8


def test_numa_bound_learners_size_from_their_own_nodes(host: Host) -> None:
    """2 nodes of 8 CPUs, a GPU on each: each learner keeps 2 of its node, 6 collectors per learner."""
    sizing = _size(host([range(8), range(8, 16)], [0, 1]), devices=["cuda:0", "cuda:1"], num_envs=480)
    assert (sizing.num_collectors, sizing.cpus_per_collector) == (12, 1)
    assert "NUMA node" in sizing.reason


def test_explicit_values_win(host: Host) -> None:
    """A set num_collectors is kept and its CPUs sized around it; a set cpus_per_collector (or null) too."""
    layout = host([range(16)], [0])
    assert (
        _size(layout, num_collectors=7).cpus_per_collector,
        _size(layout, num_collectors=7).num_collectors,
    ) == (2, 7)
    assert _size(layout, cpus_per_collector=None).cpus_per_collector is None
    assert _size(layout, num_collectors=4, cpus_per_collector=3).cpus_per_collector == 3
    two_each = _size(layout, cpus_per_collector=2)  # the count sized around a width that was set
    assert (two_each.num_collectors, two_each.cpus_per_collector) == (7, 2)


def test_an_unsplittable_env_count_is_one_line_with_the_fix(host: Host) -> None:
    """3 envs over 2 learners has no valid collector count: the error names the fix."""
    with pytest.raises(TopologyError, match=r"num_envs=3 cannot be split .* use a multiple of 2 envs"):
        _size(host([range(16)], [0, 0]), devices=["cuda:0", "cuda:0"], num_envs=3, envs_fixed=True)


@pytest.mark.parametrize("cpus", [2, 3, 8, 16, 33, 64])
@pytest.mark.parametrize("gpu", [True, False])
def test_every_sizing_resolves_to_a_valid_placement(
    host: Callable[..., HostLayout], cpus: int, gpu: bool
) -> None:
    """Whatever the host, the sized counts pass the resolver's own count and CPU rules."""
    layout = host([range(cpus)], [0] if gpu else [])
    device = "cuda:0" if gpu else "cpu"
    sizing = _size(layout, devices=[device])
    resolve_trainer_topology(**dict(
        DEFAULTS, num_envs=sizing.num_envs, num_collectors=sizing.num_collectors,
        cpus_per_collector=sizing.cpus_per_collector, trainer_device=device, num_cuda_devices=int(gpu),
        host=layout,
    ))  # fmt: skip
