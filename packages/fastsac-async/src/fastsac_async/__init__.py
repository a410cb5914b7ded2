"""fastsac-async: the asynchronous FastSAC engine (collectors, learners, supervision).

Collector processes step env shards and push transitions into per-collector SPSC rings; learner
ranks drain each of their collectors' rings into its own replay env block (or, with
``ingest="generations"``, into complete generations), decide updates in lockstep, train and publish
weights. The parent
allocates shared memory, spawns and supervises the workers.

The public face is this module's ``__all__``: what a caller needs to run the engine, read what it
reports and find what it wrote. One submodule is public too: ``fastsac_async.testing`` (a fake env,
CPU topologies and the worker bodies the fault tests use; other packages' tests use it). Everything
else is the engine's inside, importable by path for tests and benchmarks but free to change.

Each name loads its module on first use (``__getattr__``): ``prestart_workers`` imports no torch, so
the trainer starts the workers' fork server before it imports torch itself (Note [fork server]).

Folders by role: ``collector/``, ``learner/`` and ``evaluator/`` (each a loop drivable in-process
and its process entry point), ``parent/`` (engine, monitor, supervisor, fork server, janitor); at the top the
records every side shares (``config``, ``eval_settings``, ``spec``, ``control``, ``stats``,
``exceptions``), the run folder's layout (``run_layout``), the transports and what they carry
(``transport``), the worker process frame and worker names (``worker_process``) and learners across
hosts (``hosts``).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastsac_async.config import AsyncOptions
    from fastsac_async.eval_settings import ClipRecorder, EvalSettings
    from fastsac_async.evaluator.loop import EvalReport, Evaluator
    from fastsac_async.exceptions import (
        AsyncConfigError,
        AsyncEngineError,
        BootTimeoutError,
        RunAborted,
        WorkerFailed,
    )
    from fastsac_async.hosts import HostGroup, iteration_env_steps, learner_rank, open_store
    from fastsac_async.learner.profiler import profile_iterations
    from fastsac_async.parent.engine import EngineResult, EngineStats, StopReason, run_engine
    from fastsac_async.parent.fork_server import PrestartedWorkers, prestart_workers
    from fastsac_async.run_layout import RunLayout, checkpoint_step
    from fastsac_async.spec import EngineSpec, TrainingRun
    from fastsac_async.stats import CollectorSnapshot, CollectorSummary, LearnerSnapshot
    from fastsac_async.transport import transition_ring_bytes
    from fastsac_async.worker_process import evaluator_name
    from fastsac_async.worker_start import PROFILE_BOOT_ENV, process_start_time, profile_boot, write_profile

__all__ = [  # noqa: RUF022 - grouped by role
    # Running the engine: the options, the run, the engine's record of both, and how it ended
    "AsyncOptions",
    "TrainingRun",
    "EngineSpec",
    "run_engine",
    "prestart_workers",
    "PrestartedWorkers",
    "EngineResult",
    "StopReason",
    "profile_iterations",
    "transition_ring_bytes",
    # Learners across hosts
    "HostGroup",
    "open_store",
    "learner_rank",
    "iteration_env_steps",
    # What a running engine reports (every stats tick)
    "EngineStats",
    "LearnerSnapshot",
    "CollectorSnapshot",
    "CollectorSummary",
    # The run folder: every path in it
    "RunLayout",
    "checkpoint_step",
    "evaluator_name",
    # Start-up profiles (every worker's and the trainer's own: FASTSAC_PROFILE_BOOT) and its clock
    "PROFILE_BOOT_ENV",
    "profile_boot",
    "process_start_time",
    "write_profile",
    # Evaluation: by the engine's evaluator worker, or inline in a synchronous trainer
    "EvalSettings",
    "ClipRecorder",
    "Evaluator",
    "EvalReport",
    # Errors
    "AsyncConfigError",
    "AsyncEngineError",
    "BootTimeoutError",
    "RunAborted",
    "WorkerFailed",
]

_HOMES = {  # the module that defines each exported name
    "fastsac_async.config": ("AsyncOptions",),
    "fastsac_async.eval_settings": ("ClipRecorder", "EvalSettings"),
    "fastsac_async.evaluator.loop": ("EvalReport", "Evaluator"),
    "fastsac_async.exceptions": (
        "AsyncConfigError",
        "AsyncEngineError",
        "BootTimeoutError",
        "RunAborted",
        "WorkerFailed",
    ),
    "fastsac_async.hosts": ("HostGroup", "iteration_env_steps", "learner_rank", "open_store"),
    "fastsac_async.learner.profiler": ("profile_iterations",),
    "fastsac_async.parent.engine": ("EngineResult", "EngineStats", "StopReason", "run_engine"),
    "fastsac_async.parent.fork_server": ("PrestartedWorkers", "prestart_workers"),
    "fastsac_async.run_layout": ("RunLayout", "checkpoint_step"),
    "fastsac_async.spec": ("EngineSpec", "TrainingRun"),
    "fastsac_async.stats": ("CollectorSnapshot", "CollectorSummary", "LearnerSnapshot"),
    "fastsac_async.transport": ("transition_ring_bytes",),
    "fastsac_async.worker_process": ("evaluator_name",),
    "fastsac_async.worker_start": ("PROFILE_BOOT_ENV", "process_start_time", "profile_boot", "write_profile"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    """An exported name, loaded from its module at its first use."""
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later uses find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME_OF})
