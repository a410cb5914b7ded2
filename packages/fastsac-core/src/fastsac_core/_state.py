"""The training state of an agent as a checkpoint holds it (``FastSACAgent.state_dict``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._agent import FastSACAgent

__all__ = ["agent_state", "load_agent_state"]

log = logging.getLogger(__name__)


def agent_state(agent: FastSACAgent, include_buffer: bool) -> dict[str, Any]:
    """Networks, targets, optimizers, log_alpha, GradScaler, normalizers, reward scale, counters, replay."""
    return {
        **agent.model.state_dict(),
        "scaler": agent.precision.state_dict(),
        "obs_normalizer": agent.obs_normalizer.state_dict(),
        "critic_obs_normalizer": agent.critic_obs_normalizer.state_dict(),
        "reward_scale": agent.reward_scale.state_dict(),
        "update_idx": agent.update_idx,
        "last_actor_metrics": [t.clone() for t in agent.last_actor_metrics],
        "buffer": agent.buffer.state_dict(include_data=include_buffer),
    }


def load_agent_state(agent: FastSACAgent, state: dict[str, Any]) -> None:
    """Restore ``agent_state`` into ``agent`` (shapes already checked; see ``load_checkpoint``)."""
    agent.steps.reset()  # first: even a load that fails half-way leaves no stale graph
    agent.model.load_state_dict(state)
    agent.precision.load_state_dict(state["scaler"])
    agent.obs_normalizer.load_state_dict(state["obs_normalizer"])
    if agent.critic_obs_normalizer is not agent.obs_normalizer:  # a shared one is saved twice
        agent.critic_obs_normalizer.load_state_dict(state["critic_obs_normalizer"])
    if "reward_scale" in state:
        agent.reward_scale.load_state_dict(state["reward_scale"])
    else:  # written before reward normalisation existed (Note [reward scale])
        agent.reward_scale.reset()
        if agent.reward_scale.enabled:
            log.warning("the checkpoint holds no reward statistics; the reward scale starts afresh")
    agent.update_idx = int(state["update_idx"])
    a, b = (t.to(agent.device) for t in state["last_actor_metrics"])
    agent.last_actor_metrics = (a, b)
    agent.buffer.load_state_dict(state["buffer"])
