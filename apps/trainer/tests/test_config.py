"""Config composition, validation, device resolution and the CPU profile (in-process)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from omegaconf import OmegaConf

from fastsac_trainer.config import placement as placement_module
from fastsac_trainer.config import resolve as resolve_module
from fastsac_trainer.config.compose import compose_config, explicit_keys, merge_overrides
from fastsac_trainer.config.exceptions import ConfigError, TrainerAppError
from fastsac_trainer.config.placement import describe_placement, resolve_placement
from fastsac_trainer.config.resolve import CPU_PROFILE, apply_cpu_profile, resolve_device, resolve_run
from fastsac_trainer.config.store import task_node
from fastsac_trainer.config.validate import validate_config
from fastsac_trainer.tasks import TASKS
from numa_bind import GpuLocality, HostLayout, NumaNode

OPTS = "algo.trainer.async_options"


def _cfg(*overrides: str) -> dict[str, Any]:
    cfg = OmegaConf.to_container(compose_config(list(overrides)), resolve=True)
    assert isinstance(cfg, dict)
    return cfg  # type: ignore[return-value]


@pytest.mark.parametrize("name", list(TASKS))
def test_task_nodes_come_from_the_registry(name: str) -> None:
    """Every registry task composes with its env, env count, budget and agent overrides."""
    spec = TASKS[name]
    cfg = _cfg(f"task={name}")
    assert cfg["task"]["env_id"] == spec.env_id
    assert cfg["task"]["num_envs"] == spec.num_envs
    assert cfg["algo"]["trainer"]["num_learning_iterations"] == spec.num_learning_iterations
    for key, value in spec.agent_overrides.items():
        assert cfg["algo"]["agent"][key] == value
    assert task_node(spec)["task"]["name"] == name


def test_command_line_beats_the_task_node() -> None:
    """An explicit algo.agent override wins over the task's value, and keys are typed."""
    cfg = _cfg("task=pendulum", "algo.agent.batch_size=128", f"{OPTS}.num_collectors=2")
    assert cfg["algo"]["agent"]["batch_size"] == 128
    assert cfg["algo"]["trainer"]["async_options"]["num_collectors"] == 2


def test_explicit_keys_parses_the_override_keys() -> None:
    """Keys set on the command line are found, with + prefixes stripped."""
    keys = explicit_keys(["task=ant", "algo.agent.batch_size=4", "+task.extra=1"])
    assert keys == {"task", "algo.agent.batch_size", "task.extra"}


def test_merge_overrides_keeps_one_entry_per_key_the_latest() -> None:
    """Merging saved and new overrides keeps each key once, with its latest value."""
    saved = ["task=ant", "seed=1", "algo.agent.gamma=0.9", "seed=2"]
    assert merge_overrides(saved, ["task=hopper", "+seed=3"]) == [
        "algo.agent.gamma=0.9",
        "task=hopper",
        "+seed=3",
    ]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["task=nope"], "task='nope' is invalid: unknown task; choose one of: "),
        (["algo.agent.batch_size=abc"], "algo.agent.batch_size='abc' is invalid"),
        (["algo.agent.nokey=1"], "algo.agent.nokey is not a setting"),
        ([f"{OPTS}.num_collectors=="], "malformed override"),
        (["foo"], "malformed override: 'foo'"),
        (["algo.trainer.asynchronous=maybe"], "algo.trainer.asynchronous='maybe' is invalid"),
    ],
)
def test_hydra_errors_become_one_line(overrides: list[str], expected: str) -> None:
    """Hydra/OmegaConf errors are condensed to one line naming the override."""
    with pytest.raises(TrainerAppError) as info:
        compose_config(overrides)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(expected)
    if overrides == ["task=nope"]:
        assert all(name in message for name in TASKS)


@pytest.mark.parametrize(
    ("override", "setting", "fix_part"),
    [
        (f"{OPTS}.ring_capacity=-1", f"{OPTS}.ring_capacity", "positive"),
        (f"{OPTS}.ring_capacity=0", f"{OPTS}.ring_capacity", "positive"),
        (f"{OPTS}.max_lead=0", f"{OPTS}.max_lead", "or null (the ring is the only bound)"),
        (f"{OPTS}.utd_mode=fast", f"{OPTS}.utd_mode", "strict or learner_bound"),
        (f"{OPTS}.ingest=lockstep", f"{OPTS}.ingest", "generations or ragged"),
        (f"{OPTS}.transition_ipc=maybe", f"{OPTS}.transition_ipc", "auto, on or off"),
        (f"{OPTS}.weight_publish_interval=0", f"{OPTS}.weight_publish_interval", "positive"),
        (f"{OPTS}.collector_spin_s=5", f"{OPTS}.collector_spin_s", "up to 1 s"),
        (f"{OPTS}.collector_spin_s=-0.1", f"{OPTS}.collector_spin_s", "0 (sleep at once)"),
        (f"{OPTS}.num_collectors=3", f"{OPTS}.num_collectors", "choose from {1, 2, 4, 8}"),
        (f"{OPTS}.num_learners=3", f"{OPTS}.num_learners", "not divisible"),
        ("algo.trainer.logging_interval=0", "algo.trainer.logging_interval", "positive"),
        ("algo.trainer.save_interval=-5", "algo.trainer.save_interval", "positive"),
        ("algo.trainer.device=tpu", "algo.trainer.device", "auto, cpu, cuda or cuda:N"),
        ("algo.trainer.device=cuda:99", "algo.trainer.device", "cuda"),
        ("algo.agent.gamma=1.5", "algo.agent.gamma", "(0, 1]"),
        ("algo.agent.amp_dtype=fp8", "algo.agent.amp_dtype", "bf16 or fp16"),
        ("algo.agent.cudagraph_scope=kernel", "algo.agent.cudagraph_scope", "regions or step"),
        ("algo.agent.num_updates=0", "algo.agent.num_updates", "use at least 1 update per iteration"),
        ("algo.agent.batch_size=0", "algo.agent.batch_size", "use a positive batch size"),
        ("algo.agent.learning_starts=-1", "algo.agent.learning_starts", "use 0 or more iterations"),
        ("algo.agent.actor_hidden_dim=2", "algo.agent.actor_hidden_dim", "at least 4"),
        ("algo.agent.num_atoms=1", "algo.agent.num_atoms", "at least 2 atoms"),
        ("algo.agent.log_std_min=1.0", "algo.agent.log_std_min", "below log_std_max=0.0"),
        ("console=fancy", "console", "auto, rich or plain"),
    ],
)
def test_invalid_values_name_setting_value_and_fix(override: str, setting: str, fix_part: str) -> None:
    """Each invalid value raises a one-line ConfigError naming the setting's key path, the value and a fix."""
    cfg = _cfg("task=pendulum", "task.num_envs=8", f"{OPTS}.num_collectors=1", override)
    with pytest.raises(ConfigError) as info:
        validate_config(cfg, cuda_count=1)
    assert info.value.setting == setting
    assert str(info.value).startswith(f"{setting}=")
    assert "\n" not in str(info.value)
    assert fix_part in info.value.fix


def test_yaml_booleans_are_accepted_for_switches() -> None:
    """transition_ipc=true/false mean on/off (the reference accepted YAML booleans)."""
    cfg = _cfg("task=pendulum", f"{OPTS}.transition_ipc=true", f"{OPTS}.weight_ipc=false")
    validate_config(cfg, cuda_count=0)
    assert cfg["algo"]["trainer"]["async_options"]["transition_ipc"] == "on"
    assert cfg["algo"]["trainer"]["async_options"]["weight_ipc"] == "off"


def test_v_min_v_max_are_checked_only_when_the_critic_uses_them() -> None:
    """v_min >= v_max is refused with fixed supports, accepted with reward normalisation (they go unused)."""
    equal = ("task=pendulum", "algo.agent.v_min=5", "algo.agent.v_max=5")
    with pytest.raises(ConfigError, match=r"algo\.agent\.v_min"):
        validate_config(_cfg(*equal), cuda_count=0)
    validate_config(_cfg(*equal, "algo.agent.reward_normalization=true"), cuda_count=0)


def test_cuda_without_cuda_is_refused() -> None:
    """device=cuda on a machine with no CUDA device says so and suggests cpu."""
    cfg = _cfg("task=pendulum", "algo.trainer.device=cuda")
    with pytest.raises(ConfigError, match="CUDA is not available"):
        validate_config(cfg, cuda_count=0)


@pytest.mark.parametrize(
    ("devices", "learners", "value", "fix"),
    [
        ("[cuda:0]", 2, ["cuda:0"], "it has 1 entries but num_learners=2; give one device per learner"),
        ("[cpu,tpu]", 2, "tpu", "it is not a device; use 'cpu', 'cuda' or 'cuda:N'"),
        ("[cuda:0,cuda:3]", 2, "cuda:3", "it names a missing device: this host has 2 CUDA device(s)"),
        (
            "[cuda:1,cuda:1]",
            2,
            ["cuda:1", "cuda:1"],
            "it repeats cuda:1; give every CUDA learner its own GPU",
        ),
        ("[cpu,cuda:0]", 2, ["cpu", "cuda:0"], "it mixes CPU and CUDA learners; use all 'cpu'"),
    ],
)
def test_learner_devices_are_checked_by_topology_and_worded_with_the_key_path(
    devices: str, learners: int, value: object, fix: str
) -> None:
    """A bad learner_devices list: topology's rule, one ConfigError with the key path, value and fix."""
    cfg = _cfg("task=pendulum", "task.num_envs=8", f"{OPTS}.num_collectors=2",
               f"{OPTS}.num_learners={learners}", f"{OPTS}.learner_devices={devices}")  # fmt: skip
    with pytest.raises(ConfigError) as info:
        validate_config(cfg, cuda_count=2)
    assert (info.value.setting, info.value.value) == (f"{OPTS}.learner_devices", value)
    assert str(info.value).startswith(f"{OPTS}.learner_devices={value!r} is invalid: {fix}")


def test_more_cuda_learners_than_gpus_is_worded_with_the_key_path() -> None:
    """num_learners beyond the GPUs (topology's expansion rule): the key path, the value and the fix."""
    cfg = _cfg("task=pendulum", "algo.trainer.device=cuda", f"{OPTS}.num_learners=4")
    with pytest.raises(ConfigError) as info:
        resolve_run(cfg, explicit=frozenset(), cuda_count=2)
    assert (info.value.setting, info.value.value) == (f"{OPTS}.num_learners", 4)
    assert str(info.value) == (
        f"{OPTS}.num_learners=4 is invalid: from the trainer's device 'cuda:0' the learners need "
        "cuda:0..cuda:3, but this host has 2 CUDA device(s); use num_learners <= 2: every CUDA learner "
        "needs its own GPU"
    )


def test_cuda_inference_for_cpu_learners_is_worded_with_the_key_path() -> None:
    """collector_inference_device=cuda with CPU learners (topology's rule): the key path, value and fix."""
    cfg = _cfg("task=pendulum", "algo.trainer.device=cpu", f"{OPTS}.num_collectors=1",
               f"{OPTS}.collector_inference_device=cuda")  # fmt: skip
    run = resolve_run(cfg, explicit=frozenset(), cuda_count=1)
    with pytest.raises(ConfigError) as info:
        resolve_placement(run, run.dims, cuda_count=1)
    assert (info.value.setting, info.value.value) == (f"{OPTS}.collector_inference_device", "cuda")
    assert str(info.value) == (
        f"{OPTS}.collector_inference_device='cuda' is invalid: it means the owner learner's GPU, "
        "but the learners run on cpu; use 'cpu', 'auto' or an explicit 'cuda:N'"
    )


@pytest.fixture
def gpu_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """The app sees the GPU host's shape (16 CPUs on one node, one GPU, no CPU quota) instead of this one."""
    gpu = GpuLocality(cuda_index=0, pci_bus_id=None, numa_node=0, local_cpus=None, source="nvml")
    node = NumaNode(id=0, cpus=tuple(range(16)), memory_bytes=1 << 37)
    host = HostLayout(nodes=(node,), allowed_cpus=node.cpus, gpus=(gpu,))
    for module in (resolve_module, placement_module):
        monkeypatch.setattr(module, "host_layout", lambda with_gpus: host)
    monkeypatch.setattr(resolve_module, "host_quota", lambda: None)


@pytest.mark.usefixtures("gpu_host")
@pytest.mark.parametrize("name", list(TASKS))
def test_every_task_infers_on_its_collectors_cpus_on_the_gpu_host(name: str) -> None:
    """On a 16-CPU host with one GPU each task's default collectors (14; pendulum 4) infer on their CPUs."""
    run = resolve_run(_cfg(f"task={name}"), explicit=frozenset({"task"}), cuda_count=1)
    plan = resolve_placement(run, run.dims, cuda_count=1)
    assert run.device == "cuda:0" and len(plan.collectors) == min(14, run.num_envs)
    assert {(c.inference_device, c.transition_transport, c.weight_transport) for c in plan.collectors} == {
        ("cpu", "host", "host")
    }
    assert plan.notes[0].startswith("collector_inference_device='auto': the collectors infer on their CPUs")
    assert "collector_compile" not in describe_placement(run, plan)


@pytest.mark.usefixtures("gpu_host")
def test_a_collector_compile_with_collectors_on_their_cpus_is_noted() -> None:
    """collector_compile=true where 'auto' puts the policy on the CPUs: the placement says it does nothing."""
    cfg = _cfg("task=hopper", f"{OPTS}.collector_compile=true")
    run = resolve_run(cfg, explicit=frozenset({"task", f"{OPTS}.collector_compile"}), cuda_count=1)
    text = describe_placement(run, resolve_placement(run, run.dims, cuda_count=1))
    assert text.endswith(
        f"note: {OPTS}.collector_compile=true compiles only a policy on CUDA, and these collectors infer on "
        f"their CPUs; set {OPTS}.collector_inference_device=cuda to compile it"
    ), text
    cfg = _cfg("task=hopper", f"{OPTS}.collector_compile=true", f"{OPTS}.collector_inference_device=cuda")
    run = resolve_run(cfg, explicit=frozenset({"task"}), cuda_count=1)
    plan = resolve_placement(run, run.dims, cuda_count=1)
    assert {c.inference_device for c in plan.collectors} == {"cuda:0"}
    assert "collector_compile" not in describe_placement(run, plan)
    cfg = _cfg("task=hopper", "algo.trainer.device=cpu", f"{OPTS}.collector_compile=true")
    run = resolve_run(cfg, explicit=frozenset({"task"}), cuda_count=1)
    plan = resolve_placement(run, run.dims, cuda_count=1)
    assert "collector_compile" not in describe_placement(run, plan), "CPU learners: 'cuda' is no choice"


def test_collectors_that_do_not_fit_the_cpus_are_worded_with_the_key_path() -> None:
    """cpus_per_collector beyond the host's CPUs (topology's fit rule): the key path, the value, the fix."""
    cfg = _cfg("task=pendulum", "task.num_envs=2", "algo.trainer.device=cpu", f"{OPTS}.num_collectors=2",
               f"{OPTS}.cpus_per_collector=512")  # fmt: skip
    run = resolve_run(cfg, explicit=frozenset(), cuda_count=0)
    with pytest.raises(ConfigError) as info:
        resolve_placement(run, run.dims, cuda_count=0)
    assert (info.value.setting, info.value.value) == (f"{OPTS}.cpus_per_collector", 512)
    message = str(info.value)
    assert message.startswith(f"{OPTS}.cpus_per_collector=512 is invalid: ") and "\n" not in message
    assert "CPU(s) for 2 collector(s), which need 1024; " in message and "set cpus_per_collector" in message


def test_several_cpu_learners_may_be_listed() -> None:
    """learner_devices=[cpu, cpu] is valid, as is its expansion from device=cpu (gloo ranks)."""
    cfg = _cfg("task=pendulum", "task.num_envs=8", f"{OPTS}.num_collectors=2", f"{OPTS}.num_learners=2",
               f"{OPTS}.learner_devices=[cpu,cpu]")  # fmt: skip
    validate_config(cfg, cuda_count=0)


@pytest.mark.parametrize(
    ("spec", "count", "expected"),
    [
        ("auto", 0, "cpu"),
        ("auto", 2, "cuda:0"),
        ("cuda", 1, "cuda:0"),
        ("cuda:1", 2, "cuda:1"),
        ("cpu", 4, "cpu"),
    ],
)
def test_device_resolution(spec: str, count: int, expected: str) -> None:
    """Device auto picks cuda:0 when CUDA exists, else cpu; cuda means cuda:0."""
    assert resolve_device(spec, count) == expected


def test_cpu_profile_caps_only_keys_the_user_did_not_set() -> None:
    """The CPU profile lowers the humanoid defaults but keeps an explicit batch_size."""
    cfg = _cfg("algo.agent.batch_size=4096", f"{OPTS}.num_collectors=1")  # the profile runs after sizing
    notes = apply_cpu_profile(cfg, frozenset({"algo.agent.batch_size"}))
    assert cfg["algo"]["agent"]["batch_size"] == 4096
    assert cfg["task"]["num_envs"] == CPU_PROFILE["task.num_envs"]
    assert cfg["algo"]["agent"]["num_updates"] == CPU_PROFILE["algo.agent.num_updates"]
    assert any(note.startswith(f"task.num_envs {TASKS['humanoid'].num_envs}->") for note in notes)


def test_the_cpu_profile_leaves_a_task_sized_for_the_cpu() -> None:
    """task=pendulum (cpu_sized) keeps its 4 updates per iteration on a CPU learner: no cap, no note."""
    cfg = _cfg("task=pendulum", f"{OPTS}.num_collectors=1")
    assert apply_cpu_profile(cfg, frozenset()) == []
    assert cfg["algo"]["agent"]["num_updates"] == TASKS["pendulum"].agent_overrides["num_updates"] == 4


def test_cpu_profile_keeps_env_count_divisible_by_collectors() -> None:
    """With 3 learners and 6 collectors, the capped values stay valid multiples."""
    cfg = _cfg("task.num_envs=600", f"{OPTS}.num_collectors=6", f"{OPTS}.num_learners=3")
    apply_cpu_profile(cfg, frozenset())
    assert cfg["task"]["num_envs"] % 6 == 0
    assert cfg["algo"]["agent"]["batch_size"] % 3 == 0


def test_a_batch_size_the_user_set_must_divide_by_the_env_count() -> None:
    """An explicit batch_size that does not split over task.num_envs is one line with the valid sizes."""
    overrides = ("task=pendulum", "task.num_envs=12", "algo.agent.batch_size=250")
    explicit = frozenset({"task.num_envs", "algo.agent.batch_size"})
    with pytest.raises(ConfigError) as info:
        resolve_run(_cfg(*overrides), explicit=explicit, cuda_count=0)
    assert str(info.value) == (
        "algo.agent.batch_size=250 is invalid: it is not divisible by the run's 12 envs "
        "(each env gives every update batch_size / 12 samples); use 240 or 252"
    )


def test_a_task_batch_size_is_fitted_to_the_env_count_with_a_note() -> None:
    """A batch_size the user did not set becomes the nearest multiple of task.num_envs, and a note says so."""
    cfg = _cfg("task=pendulum", "task.num_envs=12", f"{OPTS}.num_collectors=1")
    run = resolve_run(cfg, explicit=frozenset({"task.num_envs", f"{OPTS}.num_collectors"}), cuda_count=0)
    task_batch = TASKS["pendulum"].agent_overrides["batch_size"]
    assert (task_batch, run.agent.batch_size) == (256, 252)
    assert "algo.agent.batch_size 256->252 (divisible by task.num_envs=12)" in run.notes


def test_resolve_run_builds_library_configs() -> None:
    """A valid config resolves into FastSACConfig/AsyncOptions with the probed dims."""
    cfg = _cfg("task=pendulum", f"{OPTS}.num_collectors=2", f"{OPTS}.learner_devices=[cpu]")
    run = resolve_run(cfg, explicit=frozenset(), cuda_count=0)
    assert run.device == "cpu"
    assert run.agent.batch_size == TASKS["pendulum"].agent_overrides["batch_size"]
    assert run.async_options.num_collectors == 2
    assert run.async_options.learner_devices == ("cpu",)
    assert run.dims.obs_dim > 0 and run.dims.act_dim > 0


def test_collector_counts_default_to_auto_and_are_sized_to_this_machine() -> None:
    """Async default: num_collectors/cpus_per_collector are sized from this host, the note says why."""
    cfg = _cfg("task=pendulum", "algo.trainer.asynchronous=true")
    assert cfg["algo"]["trainer"]["async_options"]["num_collectors"] == "auto"
    run = resolve_run(cfg, explicit=frozenset(), cuda_count=0)
    usable = len(os.sched_getaffinity(0))
    expected = max(1, usable - max(1, usable // 2))
    assert run.async_options.num_collectors == min(expected, run.config["task"]["num_envs"])
    assert run.async_options.cpus_per_collector is None  # CPU learner: collectors share its cores
    assert run.config["task"]["num_envs"] % run.async_options.num_collectors == 0
    assert any(note.startswith("auto: ") and f"affinity {usable}" in note for note in run.notes), run.notes


def test_a_synchronous_run_compiles_first_and_says_so_when_asked_otherwise() -> None:
    """compile_in_background (the async default) is off for the sync trainer, noted only when given."""
    flag = "algo.agent.compile_in_background=true"
    note = "algo.agent.compile_in_background=true->false: a synchronous run compiles first"
    for given in (frozenset(), frozenset({"algo.agent.compile_in_background"})):
        overrides = ("task=pendulum", "algo.trainer.asynchronous=false", *([flag] if given else []))
        sync = resolve_run(_cfg(*overrides), explicit=given, cuda_count=0)
        assert not sync.agent.compile_in_background
        assert not sync.config["algo"]["agent"]["compile_in_background"]
        assert (note in sync.notes) == bool(given)
    run = resolve_run(
        _cfg("task=pendulum", "algo.trainer.asynchronous=true"), explicit=frozenset(), cuda_count=0
    )
    assert run.agent.compile_in_background and not any("compile_in_background" in n for n in run.notes)


def test_explicit_collector_counts_win_and_the_sync_trainer_needs_none() -> None:
    """A given num_collectors/cpus_per_collector is kept (no sizing note); sync: auto is 1, unpinned."""
    cfg = _cfg("task=pendulum", "algo.trainer.asynchronous=true", f"{OPTS}.num_collectors=2",
               f"{OPTS}.cpus_per_collector=null")  # fmt: skip
    run = resolve_run(cfg, explicit=frozenset(), cuda_count=0)
    assert (run.async_options.num_collectors, run.async_options.cpus_per_collector) == (2, None)
    assert not any(note.startswith("auto: ") for note in run.notes)
    sync = resolve_run(
        _cfg("task=pendulum", "algo.trainer.asynchronous=false"), explicit=frozenset(), cuda_count=0
    )
    assert (sync.async_options.num_collectors, sync.async_options.cpus_per_collector) == (1, None)
    assert not any(note.startswith("auto: ") for note in sync.notes)
