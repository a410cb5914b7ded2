"""Every invalid combination raises one TopologyError that names the values and a fix."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from fastsac_topology import TopologyError, check_learner_devices

Resolve = Callable[..., Any]


def _fails(resolve: Resolve, message: str, **overrides: Any) -> TopologyError:
    with pytest.raises(TopologyError, match=re.escape(message)) as caught:
        resolve(**overrides)
    assert isinstance(caught.value, ValueError)
    return caught.value


@pytest.mark.parametrize("name", ["num_envs", "num_collectors", "num_learners", "batch_size"])
@pytest.mark.parametrize("value", [0, -3])
def test_counts_must_be_positive(resolve: Resolve, name: str, value: int) -> None:
    """A count below 1 names the count and asks for a positive integer."""
    _fails(resolve, f"{name}={value} must be at least 1; set {name} to a positive integer", **{name: value})


def test_envs_not_divisible_lists_valid_collector_counts(resolve: Resolve) -> None:
    """num_envs % num_collectors != 0 names both and lists the valid collector counts."""
    _fails(
        resolve,
        "num_envs=1000 is not divisible by num_collectors=3; "
        "choose num_collectors from {1, 2, 4, 5, 8, 10, 20, 25, 40, 50, ...}",
        num_envs=1000,
        num_collectors=3,
    )


def test_collectors_not_multiple_of_learners(resolve: Resolve) -> None:
    """num_collectors % num_learners != 0 lists collector counts that divide num_envs and are multiples."""
    _fails(
        resolve,
        "num_collectors=3 is not a multiple of num_learners=2 (every learner owns the same number of "
        "collectors); choose num_collectors from {2, 4, 6, 8, 12, 16, 24, 48}",
        num_envs=48,
        num_collectors=3,
        num_learners=2,
        batch_size=256,
    )


def test_no_collector_count_fits(resolve: Resolve) -> None:
    """When no collector count works, the fix is to make num_envs a multiple of num_learners."""
    _fails(
        resolve,
        "no collector count fits num_envs=9 with num_learners=2; "
        "make num_envs a multiple of num_learners (e.g. 10)",
        num_envs=9,
        num_collectors=3,
        num_learners=2,
    )


def test_batch_not_divisible_by_learners(resolve: Resolve) -> None:
    """batch_size % num_learners != 0 suggests the nearest batch sizes and the learner counts that fit."""
    _fails(
        resolve,
        "batch_size=4095 is not divisible by num_learners=2 (each rank samples batch_size / num_learners); "
        "choose batch_size from {4094, 4096} or num_learners from {1, 3, 5, 7, 9, 13, 15, 21, 35, 39, ...}",
        batch_size=4095,
        num_learners=2,
        num_collectors=2,
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cpus_per_collector": 0}, "cpus_per_collector=0 must be at least 1"),
        ({"cpus_per_learner": 0}, "cpus_per_learner=0 must be at least 1"),
        ({"num_cuda_devices": -1}, "num_cuda_devices=-1 must not be negative"),
        ({"weight_ipc_min_bytes": -1}, "weight_ipc_min_bytes=-1 must not be negative"),
        ({"actor_param_bytes": -5}, "actor_param_bytes=-5 must not be negative"),
        ({"transition_ipc": "yes"}, "transition_ipc='yes' is not an IPC mode; use 'auto', 'on' or 'off'"),
        ({"weight_ipc": "never"}, "weight_ipc='never' is not an IPC mode"),
    ],
)
def test_bad_settings(resolve: Resolve, overrides: dict[str, Any], message: str) -> None:
    """Out-of-range settings name the setting and value."""
    _fails(resolve, message, **overrides)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"trainer_device": "mps"},
            "trainer_device='mps' is invalid: it is not a device; use 'cpu', 'cuda' or 'cuda:N'",
        ),
        (
            {"trainer_device": "cuda:x", "num_cuda_devices": 1},
            "trainer_device='cuda:x' is invalid: it is not a device",
        ),
        (
            {"trainer_device": "cuda:2", "num_cuda_devices": 2},
            "trainer_device='cuda:2' is invalid: it names a missing device: "
            "this host has 2 CUDA device(s) (cuda:0..cuda:1)",
        ),
        (
            {"trainer_device": "cuda"},
            "trainer_device='cuda' is invalid: it names a missing device: "
            "this host has 0 CUDA device(s) (none)",
        ),
        (
            {"trainer_device": "cuda:1", "num_cuda_devices": 2, "num_learners": 2, "num_collectors": 2},
            "num_learners=2 is invalid: from the trainer's device 'cuda:1' the learners need cuda:1..cuda:2, "
            "but this host has 2 CUDA device(s); "
            "use num_learners <= 1, or list learner_devices (e.g. ['cuda:0', 'cuda:1'])",
        ),
        (
            {"trainer_device": "cuda", "num_cuda_devices": 2, "num_learners": 4, "num_collectors": 4},
            "num_learners=4 is invalid: from the trainer's device 'cuda' the learners need cuda:0..cuda:3, "
            "but this host has 2 CUDA device(s); use num_learners <= 2: every CUDA learner needs its own GPU",
        ),
        (
            {"learner_devices": ["cuda:0"], "num_cuda_devices": 2, "num_learners": 2, "num_collectors": 2},
            "learner_devices=['cuda:0'] is invalid: it has 1 entries but num_learners=2",
        ),
        (
            {
                "learner_devices": ["cuda:1", "cuda:1"],
                "num_cuda_devices": 2,
                "num_learners": 2,
                "num_collectors": 2,
            },
            "learner_devices=['cuda:1', 'cuda:1'] is invalid: it repeats cuda:1; "
            "give every CUDA learner its own GPU",
        ),
        (
            {
                "learner_devices": ["cuda", "cuda:0"],
                "num_cuda_devices": 2,
                "num_learners": 2,
                "num_collectors": 2,
            },
            "repeats cuda:0",
        ),
        (
            {
                "learner_devices": ["cpu", "cuda:0"],
                "num_cuda_devices": 1,
                "num_learners": 2,
                "num_collectors": 2,
            },
            "learner_devices=['cpu', 'cuda:0'] is invalid: it mixes CPU and CUDA learners; "
            "use all 'cpu' or all CUDA devices",
        ),
        (
            {
                "learner_devices": ["cuda:0", "cuda:3"],
                "num_cuda_devices": 2,
                "num_learners": 2,
                "num_collectors": 2,
            },
            "learner_devices='cuda:3' is invalid: it names a missing device",
        ),
        (
            {"collector_inference_device": "cuda", "num_cuda_devices": 1},
            "collector_inference_device='cuda' is invalid: it means the owner learner's GPU, "
            "but the learners run on cpu; use 'cpu', 'auto' or an explicit 'cuda:N'",
        ),
        (
            {"collector_inference_device": "cuda"},
            "collector_inference_device='cuda' is invalid: this host has no CUDA device; use 'cpu' or 'auto'",
        ),
        (
            {"collector_inference_device": "cuda:5", "num_cuda_devices": 2},
            "collector_inference_device='cuda:5' is invalid: it names a missing device",
        ),
        (
            {"collector_inference_device": "gpu"},
            "collector_inference_device='gpu' is invalid: it is not a device",
        ),
    ],
)
def test_bad_devices(resolve: Resolve, overrides: dict[str, Any], message: str) -> None:
    """Malformed, missing, repeated or mixed devices name the value and the fix."""
    _fails(resolve, message, **overrides)


def test_bound_learners_do_not_fit_their_node(resolve: Resolve, host: Callable[..., Any]) -> None:
    """Too many pinned learners on one node names the node, the CPUs available and the largest fit."""
    layout = host([range(4), range(4, 8)], [0, 0])
    _fails(
        resolve,
        "node 0 has 4 CPU(s) for 2 learner(s) but cpus_per_learner=3 needs 6; set cpus_per_learner <= 2",
        host=layout,
        trainer_device="cuda",
        num_cuda_devices=2,
        num_learners=2,
        num_collectors=2,
        cpus_per_learner=3,
    )


def test_bound_collectors_do_not_fit_their_node(resolve: Resolve, host: Callable[..., Any]) -> None:
    """Too many CPUs per collector on a node names the CPUs left after learners and the largest fit."""
    layout = host([range(8), range(8, 16)], [1])
    _fails(
        resolve,
        "node 1 (CPUs 10-15 after the learners' CPUs) has 6 CPU(s) for 4 collector(s) but "
        "cpus_per_collector=2 needs 8; set cpus_per_collector <= 1",
        host=layout,
        trainer_device="cuda",
        num_cuda_devices=1,
        num_collectors=4,
        cpus_per_collector=2,
    )


def test_unbound_collectors_do_not_fit(resolve: Resolve, host: Callable[..., Any]) -> None:
    """More pinned collectors than CPUs on a one-node host: the error says how many CPUs there are."""
    _fails(
        resolve,
        "the host (allowed CPUs left after 1 learner(s) pinned to 2 each) has 0 CPU(s) for 8 collector(s) "
        "but cpus_per_collector=1 needs 8; use fewer collectors, or set cpus_per_collector to null "
        "(unpinned)",
        host=host([range(2)]),
        num_collectors=8,
        cpus_per_collector=1,
    )


def test_unbound_collectors_report_largest_fit(resolve: Resolve, host: Callable[..., Any]) -> None:
    """On a one-node host, pinned collectors that do not fit get the largest cpus_per_collector that does."""
    _fails(
        resolve,
        "the host (allowed CPUs left after 1 learner(s) pinned to 2 each) has 14 CPU(s) for 4 collector(s) "
        "but cpus_per_collector=4 needs 16; set cpus_per_collector <= 3",
        host=host([range(16)]),
        num_collectors=4,
        cpus_per_collector=4,
    )


def test_unbound_learners_do_not_fit(resolve: Resolve, host: Callable[..., Any]) -> None:
    """Pinned CPU learners that exceed the allowed CPUs name the count and the fix."""
    _fails(
        resolve,
        "the host (allowed CPUs) has 2 CPU(s) for 2 learner(s) but cpus_per_learner=2 needs 4; "
        "set cpus_per_learner <= 1",
        host=host([range(2)]),
        num_learners=2,
        num_collectors=2,
        cpus_per_collector=1,
    )


@pytest.mark.parametrize(
    ("specs", "value"),
    [
        (["cpu"], ["cpu"]),  # one entry for two learners
        (["cpu", "tpu"], "tpu"),
        (["cuda:0", "cuda:9"], "cuda:9"),
        (["cuda:0", "cuda:0"], ["cuda:0", "cuda:0"]),
        (["cpu", "cuda:0"], ["cpu", "cuda:0"]),
    ],
)
def test_a_learner_device_error_names_the_setting_the_value_and_the_fix(
    specs: list[str], value: object
) -> None:
    """check_learner_devices: setting, value seen and fix as attributes, and the message made of them."""
    with pytest.raises(TopologyError) as caught:
        check_learner_devices(specs, num_learners=2, num_cuda_devices=2)
    error = caught.value
    assert (error.setting, error.value) == ("learner_devices", value)
    assert str(error) == f"learner_devices={value!r} is invalid: {error.fix}"


@pytest.mark.parametrize(
    ("overrides", "setting", "value", "fix"),
    [
        (
            {"trainer_device": "cuda:1", "num_cuda_devices": 2, "num_learners": 2, "num_collectors": 2},
            "num_learners",
            2,
            "use num_learners <= 1, or list learner_devices",
        ),
        (
            {"trainer_device": "cuda", "num_cuda_devices": 2, "num_learners": 4, "num_collectors": 4},
            "num_learners",
            4,
            "use num_learners <= 2",
        ),
        ({"trainer_device": "mps"}, "trainer_device", "mps", "use 'cpu', 'cuda' or 'cuda:N'"),
        (
            {"collector_inference_device": "cuda", "num_cuda_devices": 1},
            "collector_inference_device",
            "cuda",
            "use 'cpu', 'auto' or an explicit 'cuda:N'",
        ),
        ({"collector_inference_device": "cuda"}, "collector_inference_device", "cuda", "use 'cpu' or 'auto'"),
        (
            {"collector_inference_device": "cuda:5", "num_cuda_devices": 2},
            "collector_inference_device",
            "cuda:5",
            "use one of them or 'cpu'",
        ),
    ],
)
def test_a_device_error_names_the_setting_the_value_and_the_fix(
    resolve: Resolve, overrides: dict[str, Any], setting: str, value: object, fix: str
) -> None:
    """Learner expansion and inference-device errors: setting, value and fix as attributes and in the text."""
    with pytest.raises(TopologyError) as caught:
        resolve(**overrides)
    error = caught.value
    assert (error.setting, error.value) == (setting, value)
    assert fix in error.fix
    assert str(error) == f"{setting}={value!r} is invalid: {error.fix}"
    assert "\n" not in str(error)


def test_several_cpu_learners_are_allowed_and_cuda_means_cuda_0() -> None:
    """Two CPU learners are valid (gloo ranks); 'CUDA' normalises to cuda:0."""
    assert check_learner_devices(["cpu", "cpu"], num_learners=2, num_cuda_devices=0) == ("cpu", "cpu")
    assert check_learner_devices(["CUDA", "cuda:1"], num_learners=2, num_cuda_devices=2) == (
        "cuda:0",
        "cuda:1",
    )
