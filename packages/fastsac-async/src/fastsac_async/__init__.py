"""fastsac-async: the asynchronous FastSAC engine (collectors, learners, supervision).

Folders by role: ``collector/`` and ``learner/`` (each a loop drivable in-process and its process
entry point), ``parent/`` (engine, monitor, supervisor, janitor); at the top the records every side
shares (``config``, ``eval_settings``, ``spec``, ``control``, ``stats``, ``exceptions``), the run
folder's layout (``run_layout``), the transports and what they carry (``transport``), the worker
process frame and worker names (``worker_process``), learners across hosts (``hosts``) and the test
doubles (``testing``).

Collector processes step env shards and push transitions into per-collector SPSC rings; learner
ranks drain their collectors' rings into complete generations (or each ring into its own replay env
block, ``ingest="ragged"``), decide updates in lockstep, train and publish weights. The parent
allocates shared memory, spawns and supervises the workers.
"""

from fastsac_async.collector.loop import Collector, CollectorSettings
from fastsac_async.collector.process import run_collector
from fastsac_async.config import AsyncOptions
from fastsac_async.control import Control
from fastsac_async.eval_settings import ClipRecorder, EvalSettings
from fastsac_async.evaluator.loop import EvalReport, Evaluator, PublishedWeights
from fastsac_async.evaluator.process import run_evaluator
from fastsac_async.exceptions import (
    AsyncConfigError,
    AsyncEngineError,
    BootTimeoutError,
    RunAborted,
    WorkerFailed,
)
from fastsac_async.hosts import HostGroup
from fastsac_async.learner.assembler import GenerationAssembler, ReadyRun
from fastsac_async.learner.collective import Collective, InProcessGroup, SoloCollective, TorchCollective
from fastsac_async.learner.decider import Decision, PublishCadence, TrainDecider, split_chunks
from fastsac_async.learner.ingest import Ingestor, RingReader
from fastsac_async.learner.loop import Learner, LearnerHooks, LearnerSettings
from fastsac_async.learner.process import run_learner
from fastsac_async.parent.engine import AsyncEngine, EngineResult, EngineStats, StopReason, run_engine
from fastsac_async.parent.supervisor import Supervisor, WorkerExit
from fastsac_async.run_layout import RunLayout, checkpoint_step
from fastsac_async.spec import EngineSpec, TrainingRun
from fastsac_async.stats import (
    CollectorSnapshot,
    CollectorSummary,
    LearnerSnapshot,
    StageTimer,
    aggregate_collectors,
)

__all__ = [  # noqa: RUF022 - grouped by topic
    # engine
    "AsyncEngine",
    "AsyncOptions",
    "EngineResult",
    "StopReason",
    "EngineSpec",
    "TrainingRun",
    "EngineStats",
    "HostGroup",
    "run_engine",
    # the run folder
    "RunLayout",
    "checkpoint_step",
    # workers
    "Collector",
    "CollectorSettings",
    "Learner",
    "LearnerHooks",
    "LearnerSettings",
    "run_collector",
    "run_learner",
    # evaluation
    "ClipRecorder",
    "EvalReport",
    "EvalSettings",
    "Evaluator",
    "PublishedWeights",
    "run_evaluator",
    # pipeline logic
    "GenerationAssembler",
    "Ingestor",
    "ReadyRun",
    "RingReader",
    "Decision",
    "PublishCadence",
    "TrainDecider",
    "split_chunks",
    # collectives
    "Collective",
    "InProcessGroup",
    "SoloCollective",
    "TorchCollective",
    # shared state and stats
    "Control",
    "CollectorSnapshot",
    "CollectorSummary",
    "LearnerSnapshot",
    "StageTimer",
    "aggregate_collectors",
    # supervision
    "Supervisor",
    "WorkerExit",
    # errors
    "AsyncConfigError",
    "AsyncEngineError",
    "BootTimeoutError",
    "RunAborted",
    "WorkerFailed",
]
