"""fastsac-core: the FastSAC learner (torch only, no processes).

The hyper-parameters (checked when built) and the training schedule (when updates are due, for both
trainers), the agent and its update steps, the replay buffer, the transition schema (the fields rings carry
and the buffer stores), the empirical normalizer with an exact cross-rank merge, gradient all-reduce
without a DDP wrapper, checkpoints and the replay buffer's own file (written beside the training, read
at a resume), a standalone inference policy for collectors, and the deterministic evaluation.

The public face is this module's ``__all__``. One submodule is public too: ``fastsac_core.testing``
(tiny configs, random data, a DDP rank worker; other packages' tests use it). The private modules
(``_agent``, ``_replay``, ...) each hold one decision (wiki/architecture.md lists them by role); they
are importable by path for this package's tests, and free to change.

Each name loads its module on first use (``__getattr__``): ``FastSACConfig``, ``EnvDims`` and the
errors come without torch, so an app's command line can answer ``--help`` at once.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._agent import FastSACAgent, UpdateNoise, sync_normalizers
    from ._batch import Batch
    from ._checkpoint import (
        discard_partial_checkpoints,
        load_checkpoint,
        peek_checkpoint,
        save_checkpoint,
        save_policy_checkpoint,
    )
    from ._compile_cache import CompileCache, use_compile_cache
    from ._env_checks import (
        ADAPTER_MARK,
        EnvCall,
        check_reset,
        check_step,
        env_fault,
        env_label,
        env_raised,
    )
    from ._evaluate import EvalResult, evaluate_policy
    from ._execution import ExecutionPolicy
    from ._inference import InferencePolicy
    from ._model import build_actor
    from ._normalizer import EmpiricalNormalizer, merge_normalizers
    from ._replay import ReplayBuffer
    from ._replay_file import (
        ReplayFileInfo,
        ReplaySaver,
        load_replay,
        peek_replay,
        replay_write_hold,
        save_replay,
        write_bound_s,
    )
    from ._replay_layout import ReplayLayout
    from ._schedule import learning_started, updates_due
    from ._schema import policy_extra_fields, step_transition, transition_fields
    from .config import FastSACConfig, batch_choices, batch_per_env
    from .env import F32, BatchedEnv, EnvDims, EnvFactory, ResumableEnv, StepResult
    from .exceptions import (
        CheckpointError,
        ConfigError,
        EnvCallError,
        EnvOutputError,
        FastSACCoreError,
        ReplayBufferError,
    )

__all__ = [  # noqa: RUF022 - grouped by role, sorted within each group
    # Contracts: the batched env a trainer steps (its output checked, its own exceptions said in one line),
    # the hyper-parameters and the batch's split over envs
    "ADAPTER_MARK",
    "BatchedEnv",
    "EnvCall",
    "EnvDims",
    "EnvFactory",
    "F32",
    "FastSACConfig",
    "ResumableEnv",
    "StepResult",
    "batch_choices",
    "batch_per_env",
    "check_reset",
    "check_step",
    "env_fault",
    "env_label",
    "env_raised",
    # Training schedule: when learning starts and the updates each env batch owes (both trainers)
    "learning_started",
    "updates_due",
    # Transition schema: what rings carry and the buffer stores, what a policy needs besides its weights
    "policy_extra_fields",
    "step_transition",
    "transition_fields",
    # Agent and policy: the learner, how its steps run, the actor a collector or an evaluation runs
    "ExecutionPolicy",
    "FastSACAgent",
    "InferencePolicy",
    "UpdateNoise",
    "build_actor",
    "sync_normalizers",
    # Data: the replay buffer, its sampled batch, the observation normalizer and its cross-rank merge
    "Batch",
    "EmpiricalNormalizer",
    "ReplayBuffer",
    "ReplayLayout",
    "merge_normalizers",
    # Evaluation: the deterministic return of a policy
    "EvalResult",
    "evaluate_policy",
    # Compilation: where torch.compile's caches live
    "CompileCache",
    "use_compile_cache",
    # Checkpoints
    "discard_partial_checkpoints",
    "load_checkpoint",
    "peek_checkpoint",
    "save_checkpoint",
    "save_policy_checkpoint",
    # Replay files
    "ReplayFileInfo",
    "ReplaySaver",
    "load_replay",
    "peek_replay",
    "replay_write_hold",
    "save_replay",
    "write_bound_s",
    # Errors
    "CheckpointError",
    "ConfigError",
    "EnvCallError",
    "EnvOutputError",
    "FastSACCoreError",
    "ReplayBufferError",
]

_HOMES = {  # the module that defines each exported name
    "._agent": ("FastSACAgent", "UpdateNoise", "sync_normalizers"),
    "._batch": ("Batch",),
    "._checkpoint": (
        "discard_partial_checkpoints",
        "load_checkpoint",
        "peek_checkpoint",
        "save_checkpoint",
        "save_policy_checkpoint",
    ),
    "._compile_cache": ("CompileCache", "use_compile_cache"),
    "._env_checks": (
        "ADAPTER_MARK",
        "EnvCall",
        "check_reset",
        "check_step",
        "env_fault",
        "env_label",
        "env_raised",
    ),
    "._evaluate": ("EvalResult", "evaluate_policy"),
    "._execution": ("ExecutionPolicy",),
    "._inference": ("InferencePolicy",),
    "._model": ("build_actor",),
    "._normalizer": ("EmpiricalNormalizer", "merge_normalizers"),
    "._replay": ("ReplayBuffer",),
    "._replay_layout": ("ReplayLayout",),
    "._replay_file": (
        "ReplayFileInfo",
        "ReplaySaver",
        "load_replay",
        "peek_replay",
        "replay_write_hold",
        "save_replay",
        "write_bound_s",
    ),
    "._schedule": ("learning_started", "updates_due"),
    "._schema": ("policy_extra_fields", "step_transition", "transition_fields"),
    ".config": ("FastSACConfig", "batch_choices", "batch_per_env"),
    ".env": ("F32", "BatchedEnv", "EnvDims", "EnvFactory", "ResumableEnv", "StepResult"),
    ".exceptions": (
        "CheckpointError",
        "ConfigError",
        "EnvCallError",
        "EnvOutputError",
        "FastSACCoreError",
        "ReplayBufferError",
    ),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    """Load an exported name from its module on first use."""
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later uses find it without this function
    return value
