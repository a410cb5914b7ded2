"""What travels between a collector and a learner, named once: the transition fields and the policy extras.

A transition is one env step of every env, as rings carry it and the replay buffer stores it:

====================  =====================  ========  ==============================================
field                 per-env shape          dtype     meaning
====================  =====================  ========  ==============================================
``obs``               ``(obs_dim,)``         float32   actor observation before the step
``critic_obs``        ``(critic_obs_dim,)``  float32   critic observation before the step (absent when
                                                       the critic observes ``obs``)
``actions``           ``(act_dim,)``         float32   action taken
``rewards``           ``()``                 float32   reward of the step
``terminated``        ``()``                 uint8     1: the episode ended in a terminal state
``truncated``         ``()``                 uint8     1: the episode was cut by a time limit
====================  =====================  ========  ==============================================

``next_obs`` is not a field: with auto-resetting envs the obs of step t+1 is the next obs of step t
(Note [replay layout]). Flags travel as ``uint8`` (0/1, one byte; 255 stays free for a ring's debug
sentinel); the replay buffer stores them as ``bool``. The names follow ``StepResult``.

The policy extras are what a collector's policy needs besides the actor weights: the obs normalizer's
float32 mean, std and count (``(1,)``), published with every weight version.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from ._normalizer import EmpiricalNormalizer
from .env import StepResult

__all__ = [
    "FieldShapes",
    "Transition",
    "load_policy_extras",
    "policy_extra_fields",
    "policy_extras",
    "step_transition",
    "transition_fields",
]

FieldShapes = dict[str, tuple[tuple[int, ...], torch.dtype]]
"""Field name -> (per-env shape, dtype), in storage order (what ``shm_transport.RingLayout.of`` takes)."""

Transition = Mapping[str, Tensor]
"""Field name -> ``(num_envs, *shape)`` values of one step (``(k, num_envs, *shape)`` for k steps)."""

_POLICY_EXTRAS = ("obs_mean", "obs_std", "obs_count")


def transition_fields(obs_dim: int, critic_obs_dim: int | None, act_dim: int) -> FieldShapes:
    """The transition fields of a task (``critic_obs_dim=None``: the critic observes ``obs``)."""
    fields: FieldShapes = {"obs": ((obs_dim,), torch.float32)}
    if critic_obs_dim is not None:
        fields["critic_obs"] = ((critic_obs_dim,), torch.float32)
    fields |= {
        "actions": ((act_dim,), torch.float32),
        "rewards": ((), torch.float32),
        "terminated": ((), torch.uint8),
        "truncated": ((), torch.uint8),
    }
    return fields


def step_transition(
    obs: Tensor, critic_obs: Tensor | None, actions: Tensor, result: StepResult
) -> dict[str, Tensor]:
    """The transition of one batched step: obs and actions before it, ``result``'s rewards and flags.

    ``critic_obs`` None: the critic observes ``obs`` (the field is left out). The result's arrays are
    wrapped, not copied (``torch.from_numpy``): copy them out before the env steps again.
    """
    fields = {"obs": obs}
    if critic_obs is not None:
        fields["critic_obs"] = critic_obs
    return fields | {
        "actions": actions,
        "rewards": torch.from_numpy(result.rewards),
        "terminated": torch.from_numpy(result.terminated),
        "truncated": torch.from_numpy(result.truncated),
    }


def policy_extra_fields(obs_dim: int) -> FieldShapes:
    """The policy extras' shapes and dtypes (what a weight channel reserves for them)."""
    shapes = ((obs_dim,), (obs_dim,), (1,))
    return {name: (shape, torch.float32) for name, shape in zip(_POLICY_EXTRAS, shapes, strict=True)}


def policy_extras(normalizer: EmpiricalNormalizer) -> dict[str, Tensor]:
    """The policy extras of ``normalizer`` (copies of its float32 statistics)."""
    n = normalizer
    return dict(zip(_POLICY_EXTRAS, (n.mean.clone(), n.std.clone(), n.count.float().reshape(1)), strict=True))


def load_policy_extras(normalizer: EmpiricalNormalizer, extras: Mapping[str, Tensor]) -> None:
    """Set ``normalizer``'s statistics to published ``extras`` (what ``policy_extras`` made)."""
    mean, std, count = (extras[name] for name in _POLICY_EXTRAS)
    normalizer.mean.copy_(mean)
    normalizer.std.copy_(std)
    normalizer.count.copy_(count.reshape(()))
