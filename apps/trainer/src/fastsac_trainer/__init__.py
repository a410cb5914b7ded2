"""The FastSAC trainer app; from Python: ``from fastsac_trainer import train, load_policy``.

The names below load on first use, so that ``trainer --help`` and the CLI's other quick paths
import nothing heavy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastsac_trainer.api import TrainingAbortedError, TrainingFailedError, TrainResult, train
    from fastsac_trainer.config.exceptions import TrainerAppError
    from fastsac_trainer.policy import Policy, load_policy

__all__ = [  # noqa: RUF022 - grouped by role
    # Training: a run, and how it ended
    "TrainResult",
    "train",
    # Acting: a trained policy from its checkpoint
    "Policy",
    "load_policy",
    # Errors
    "TrainerAppError",
    "TrainingAbortedError",
    "TrainingFailedError",
]

_HOMES = {
    "TrainerAppError": "fastsac_trainer.config.exceptions",
    "Policy": "fastsac_trainer.policy",
    "load_policy": "fastsac_trainer.policy",
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'fastsac_trainer' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES.get(name, "fastsac_trainer.api")), name)
