"""From the composed hydra config to a validated run: devices, the CPU profile, library configs.

The result, :class:`ResolvedRun`, is everything a :class:`~fastsac_trainer.plan.RunPlan` needs except the
run folder, so nothing is created on disk until the whole config is known to be valid.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastsac_async import (
    AsyncConfigError,
    AsyncOptions,
    EvalSettings,
    HostGroup,
    TrainingRun,
    profile_iterations,
)
from fastsac_core import EnvDims, EnvFactory, FastSACConfig, batch_choices
from fastsac_topology import AUTO, TopologyError, TrainerTopology, expand_learner_devices, size_collectors
from fastsac_trainer.config.exceptions import ConfigError, TrainerAppError
from fastsac_trainer.config.host import host_layout, host_quota
from fastsac_trainer.config.validate import (
    agent_config,
    async_options,
    check_counts_of,
    eval_settings,
    topology_config_error,
    validate_config,
)
from fastsac_trainer.plan import RunPlan
from fastsac_trainer.tasks import TaskError, env_factory_for, get_task, probe_dims

__all__ = [
    "CPU_PROFILE",
    "ResolvedRun",
    "apply_cpu_profile",
    "fit_batch_size_in_place",
    "resolve_device",
    "resolve_run",
    "size_collectors_in_place",
]

CPU_PROFILE: dict[str, int] = {
    "task.num_envs": 32,
    "algo.agent.batch_size": 1024,
    "algo.agent.num_updates": 2,
}
"""Caps applied when the learner runs on the CPU, to keys the user did not set: a 2-core laptop
makes visible progress on the default task (a few iterations per second instead of one every
few seconds). The networks and every other hyper-parameter keep the task's values. A task sized
for the CPU already (``TaskSpec.cpu_sized``: pendulum) keeps all of its values."""


@dataclass(frozen=True, kw_only=True)
class ResolvedRun:
    """A validated configuration: the library configs, the resolved device, the probed task."""

    config: dict[str, Any]
    """The composed config as plain containers, after the CPU profile (what ``config.yaml`` holds)."""
    task_name: str
    """Task name."""
    env_factory: EnvFactory
    """Picklable env factory of the task (``fastsac_trainer.tasks.env_factory_for``)."""
    dims: EnvDims
    """Dimensions probed from one env."""
    agent: FastSACConfig
    """FastSAC hyper-parameters."""
    async_options: AsyncOptions
    """Asynchronous options."""
    device: str
    """Resolved trainer device (``cpu`` or ``cuda:N``)."""
    evaluation: EvalSettings | None = None
    """Periodic deterministic evaluation (``algo.trainer.eval_*``; None: off)."""
    notes: tuple[str, ...] = ()
    """Lines for the console about what was adjusted (the CPU profile)."""

    @property
    def num_envs(self) -> int:
        """Envs per iteration (``task.num_envs``, after sizing and the CPU profile)."""
        return int(self.config["task"]["num_envs"])

    @property
    def asynchronous(self) -> bool:
        """Whether the asynchronous trainer runs (``algo.trainer.asynchronous``)."""
        return bool(self.config["algo"]["trainer"]["asynchronous"])

    def plan(
        self,
        run_dir: Path,
        resume_from: Path | None,
        topology: TrainerTopology | None = None,
        hosts: HostGroup | None = None,
    ) -> RunPlan:
        """The :class:`RunPlan` of this run, writing into ``run_dir``, placed by ``topology``.

        The one place the trainer's settings leave the config: the plan holds this run's records
        (agent, options) as they are and builds the :class:`~fastsac_async.TrainingRun` both
        trainers read.
        """
        trainer = self.config["algo"]["trainer"]
        return RunPlan(
            task_name=self.task_name,
            run=TrainingRun(
                env_factory=self.env_factory,
                dims=self.dims,
                seed=self.config["seed"],
                num_iterations=trainer["num_learning_iterations"],
                time_limit_s=trainer["time_limit_s"],
                logging_interval=trainer["logging_interval"],
                save_interval=trainer["save_interval"],
                save_replay=trainer["save_replay"],
                replay_save_interval_s=trainer["replay_save_interval"],
                run_dir=run_dir,
                resume_from=resume_from,
                evaluation=self.evaluation,
            ),
            num_envs=self.num_envs,
            agent=self.agent,
            async_options=self.async_options,
            asynchronous=self.asynchronous,
            device=self.device,
            stop_grace_s=trainer["stop_grace_s"],
            checkpoint_signal=trainer["checkpoint_signal"],
            topology=topology,
            hosts=hosts,
        )


def resolve_device(spec: str, cuda_count: int) -> str:
    """``auto`` -> ``cuda:0`` when CUDA is available else ``cpu``; ``cuda`` -> ``cuda:0``."""
    if spec == "auto":
        return "cuda:0" if cuda_count > 0 else "cpu"
    return "cuda:0" if spec == "cuda" else spec


def apply_cpu_profile(cfg: dict[str, Any], explicit: frozenset[str]) -> list[str]:
    """Cap the :data:`CPU_PROFILE` keys the user did not set; one note per change.

    A task that is ``cpu_sized`` is left as it is (no notes).

    Runs after the collector counts are sized (:func:`size_collectors_in_place`): ``num_envs`` stays
    a multiple of ``num_collectors``, and ``batch_size`` a multiple of the (capped) ``num_envs``.
    """
    notes: list[str] = []
    if get_task(cfg["task"]["name"]).cpu_sized:
        return notes
    collectors = cfg["algo"]["trainer"]["async_options"]["num_collectors"]
    for path, cap in CPU_PROFILE.items():
        if path in explicit:
            continue
        *parents, leaf = path.split(".")
        node = cfg
        for part in parents:
            node = node[part]
        multiples = {"task.num_envs": collectors, "algo.agent.batch_size": cfg["task"]["num_envs"]}
        multiple = multiples.get(path, 1)
        capped = max(cap - cap % multiple, multiple)
        if node[leaf] > capped:
            notes.append(f"{path} {node[leaf]}->{capped}")
            node[leaf] = capped
    return notes


def size_collectors_in_place(
    cfg: dict[str, Any], explicit: frozenset[str], device: str, cuda_count: int
) -> str:
    """Replace ``auto`` collector counts in ``cfg`` with topology's sizing; the line saying why ("" if none).

    The synchronous trainer has no collectors: ``auto`` becomes 1 collector, unpinned.

    Raises:
        TrainerAppError: ``task.num_envs`` cannot be split over the learners, or the learners do not
            fit this host's GPUs (topology's message, with the key path of the setting it names).
    """
    opts = cfg["algo"]["trainer"]["async_options"]
    if not cfg["algo"]["trainer"]["asynchronous"]:
        for key, value in (("num_collectors", 1), ("cpus_per_collector", None)):
            if opts[key] == AUTO:
                opts[key] = value
        return ""
    if AUTO not in (opts["num_collectors"], opts["cpus_per_collector"]):
        return ""
    try:
        devices = expand_learner_devices(
            trainer_device=device,
            specs=opts["learner_devices"],
            num_learners=opts["num_learners"],
            num_cuda_devices=cuda_count,
        )
        sizing = size_collectors(
            num_envs=cfg["task"]["num_envs"],
            envs_fixed="task.num_envs" in explicit,
            devices=devices,
            host=host_layout(with_gpus=cuda_count > 0),
            quota=host_quota(),
            num_collectors=opts["num_collectors"],
            cpus_per_collector=opts["cpus_per_collector"],
        )
    except TopologyError as error:
        raise topology_config_error(error) from None
    opts["num_collectors"] = sizing.num_collectors
    opts["cpus_per_collector"] = sizing.cpus_per_collector
    cfg["task"]["num_envs"] = sizing.num_envs
    return sizing.reason


def fit_batch_size_in_place(cfg: dict[str, Any], explicit: frozenset[str]) -> str:
    """Round a batch size the user did not set to the multiple of ``task.num_envs`` nearest it.

    Every env gives each update the same number of samples (``fastsac_core.batch_per_env``); a task's
    batch size stops dividing when the env count changes (set by the user, sized to the machine). A
    batch size the user set is left for :func:`~fastsac_trainer.config.validate.agent_config` to refuse
    with the valid sizes, as an explicit ``task.num_envs`` is never changed either.

    Returns:
        The line saying what changed ("" if nothing).
    """
    agent, num_envs = cfg["algo"]["agent"], cfg["task"]["num_envs"]
    batch = agent["batch_size"]
    if "algo.agent.batch_size" in explicit or batch % num_envs == 0:
        return ""
    fitted = min(batch_choices(batch, num_envs), key=lambda value: abs(value - batch))
    agent["batch_size"] = fitted
    return f"algo.agent.batch_size {batch}->{fitted} (divisible by task.num_envs={num_envs})"


def _check_environment() -> None:
    """The environment variables an asynchronous run reads, checked before anything is written."""
    try:
        profile_iterations()
    except AsyncConfigError as error:
        raise TrainerAppError(str(error)) from None


def _probe(task: dict[str, Any]) -> tuple[EnvFactory, EnvDims]:
    """The task's env factory and the dims of one env it builds; every failure is one line."""
    try:
        factory = env_factory_for(task)
        return factory, probe_dims(factory)
    except TaskError as error:
        raise TrainerAppError(str(error)) from None
    except Exception as error:  # gymnasium and user code raise many types; the user sees one line.
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        setting = "env_factory" if task.get("env_factory") else "env_id"
        value = task.get(setting)
        raise TrainerAppError(
            f"task.{setting}={value!r} is invalid: making one env failed ({type(error).__name__}: {first}); "
            "fix the env or its settings"
        ) from None


def resolve_run(cfg: dict[str, Any], *, explicit: frozenset[str], cuda_count: int) -> ResolvedRun:
    """Validate ``cfg`` (plain containers, modified in place) and resolve it into a run.

    Args:
        cfg: The composed config (``OmegaConf.to_container(..., resolve=True)``).
        explicit: Keys the user set on the command line (kept by the CPU profile).
        cuda_count: CUDA devices visible (``torch.cuda.device_count()``).

    Raises:
        TrainerAppError: Any invalid value (one line: the setting, the value seen, the fix).
    """
    learners = cfg["algo"]["trainer"]["async_options"]["num_learners"]
    if not cfg["algo"]["trainer"]["asynchronous"] and isinstance(learners, int) and learners > 1:
        # First: the counts' own rules would otherwise ask for collectors a synchronous run never starts.
        fix = "the synchronous trainer has one learner: use 1, or algo.trainer.asynchronous=true"
        raise ConfigError("algo.trainer.async_options.num_learners", learners, fix)
    validate_config(cfg, cuda_count)
    trainer = cfg["algo"]["trainer"]
    if trainer["asynchronous"]:
        _check_environment()
    device = resolve_device(trainer["device"], cuda_count)
    notes: list[str] = []
    sized = size_collectors_in_place(cfg, explicit, device, cuda_count)
    if sized:
        notes.append(sized)
    if device == "cpu":
        changed = apply_cpu_profile(cfg, explicit)
        if changed:
            notes.append(
                f"cpu learner: scaled {', '.join(changed)} "
                "(set these keys explicitly to keep the task's values)"
            )
    fitted = fit_batch_size_in_place(cfg, explicit)
    if fitted:
        notes.append(fitted)
    check_counts_of(cfg)  # the sized counts keep the rules the given ones were checked against
    if not trainer["asynchronous"] and cfg["algo"]["agent"]["compile_in_background"]:
        # Only a worker process, which ends with os._exit, may leave a compile thread running at its
        # end (Note [Compile in the background]); the synchronous trainer is the user's own process.
        # The default (on) is the asynchronous trainer's: only a value the user gave is worth a note.
        cfg["algo"]["agent"]["compile_in_background"] = False
        if "algo.agent.compile_in_background" in explicit:
            notes.append("algo.agent.compile_in_background=true->false: a synchronous run compiles first")
    agent = agent_config(cfg["algo"]["agent"], num_envs=cfg["task"]["num_envs"])
    factory, dims = _probe(cfg["task"])
    options = async_options(trainer["async_options"])
    return ResolvedRun(
        config=cfg,
        task_name=cfg["task"]["name"],
        env_factory=factory,
        dims=dims,
        agent=agent,
        async_options=options,
        device=device,
        evaluation=eval_settings(trainer, factory),
        notes=tuple(notes),
    )
