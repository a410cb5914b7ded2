"""fastsac-core: the FastSAC learner (torch only, no processes).

The hyper-parameters (checked when built) and the training schedule (when updates are due, for both
trainers), the agent and its update steps, the replay buffer, the transition schema (the fields rings carry
and the buffer stores), the empirical normalizer with an exact cross-rank merge, gradient all-reduce
without a DDP wrapper, checkpoints, a standalone inference policy for collectors, and the
deterministic evaluation.
"""

from ._agent import FastSACAgent, UpdateNoise, sync_normalizers
from ._batch import Batch
from ._checkpoint import (
    discard_partial_checkpoints,
    load_checkpoint,
    peek_checkpoint,
    save_checkpoint,
    save_policy_checkpoint,
)
from ._compile_cache import CompileCache, compile_cache, use_compile_cache
from ._distributed import all_reduce_grads, broadcast_tensors, sync_normalizer_stats
from ._evaluate import MAX_PARALLEL_ENVS, EvalResult, evaluate_policy
from ._execution import ExecutionPolicy
from ._inference import InferencePolicy
from ._model import build_actor
from ._networks import Actor, DistributionalCritic, project_distribution
from ._normalizer import EmpiricalNormalizer, merge_normalizers
from ._replay import ReplayBuffer
from ._schedule import learning_started, updates_due
from ._schema import policy_extra_fields, step_transition, transition_fields
from .config import FastSACConfig, batch_choices, batch_per_env
from .env import BatchedEnv, EnvDims, EnvFactory, StepResult
from .exceptions import CheckpointError, ConfigError, FastSACCoreError, ReplayBufferError

__all__ = [  # noqa: RUF022 - grouped by topic, sorted within each group
    # Contracts
    "BatchedEnv",
    "EnvDims",
    "EnvFactory",
    "FastSACConfig",
    "StepResult",
    "batch_choices",
    "batch_per_env",
    # Training schedule
    "learning_started",
    "updates_due",
    # Transition schema
    "policy_extra_fields",
    "step_transition",
    "transition_fields",
    # Agent
    "ExecutionPolicy",
    "FastSACAgent",
    "InferencePolicy",
    "UpdateNoise",
    "build_actor",
    # Evaluation
    "MAX_PARALLEL_ENVS",
    "EvalResult",
    "evaluate_policy",
    # Networks
    "Actor",
    "DistributionalCritic",
    "project_distribution",
    # Data
    "Batch",
    "EmpiricalNormalizer",
    "ReplayBuffer",
    "merge_normalizers",
    # Compilation
    "CompileCache",
    "compile_cache",
    "use_compile_cache",
    # Multi-learner
    "all_reduce_grads",
    "broadcast_tensors",
    "sync_normalizer_stats",
    "sync_normalizers",
    # Checkpoints
    "discard_partial_checkpoints",
    "load_checkpoint",
    "peek_checkpoint",
    "save_checkpoint",
    "save_policy_checkpoint",
    # Errors
    "CheckpointError",
    "ConfigError",
    "FastSACCoreError",
    "ReplayBufferError",
]
