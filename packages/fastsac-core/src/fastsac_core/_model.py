"""The trained state of one rank: actor, critics and their targets, ``log_alpha``, three optimizers."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from ._distributed import ProcessGroup, broadcast_tensors
from ._networks import Actor, DistributionalCritic
from .config import FastSACConfig
from .env import EnvDims

__all__ = ["SACModel", "build_actor"]


def build_actor(dims: EnvDims, cfg: FastSACConfig) -> Actor:
    """The actor network of ``cfg`` for a task of ``dims`` (shared by the agent and ``InferencePolicy``)."""
    return Actor(
        dims.obs_dim,
        dims.act_dim,
        cfg.actor_hidden_dim,
        dims.action_low,
        dims.action_high,
        cfg.log_std_min,
        cfg.log_std_max,
        cfg.use_layer_norm,
    )


class SACModel:
    """Networks, ``log_alpha`` and their optimizers, identical on every rank from the start.

    Args:
        dims: Task dimensions and action bounds.
        cfg: Hyper-parameters.
        device: Where the networks live.
        world_size: Learner ranks; above one, rank 0's initial weights are broadcast.
        process_group: torch.distributed group of the learners (default group when ``None``).
        capturable: Optimizers keep their step counts on the device (captured steps need it).
    """

    def __init__(
        self,
        dims: EnvDims,
        cfg: FastSACConfig,
        device: torch.device,
        *,
        world_size: int,
        process_group: ProcessGroup | None,
        capturable: bool,
    ) -> None:
        self.actor = build_actor(dims, cfg).to(device)
        self.qf = DistributionalCritic(
            dims.critic_obs_dim,
            dims.act_dim,
            cfg.critic_hidden_dim,
            cfg.num_atoms,
            *cfg.value_support,
            cfg.num_q_networks,
            cfg.use_layer_norm,
        ).to(device)
        self.log_alpha = torch.tensor(math.log(cfg.alpha_init), device=device, requires_grad=True)
        if world_size > 1:  # identical initial weights on every rank
            broadcast_tensors(
                [*self.actor.parameters(), *self.qf.parameters(), self.log_alpha], 0, process_group
            )
        self.qf_target = copy.deepcopy(self.qf).requires_grad_(False)
        self.target_entropy = -dims.act_dim * cfg.target_entropy_ratio

        self._fused, self._capturable = device.type == "cuda", capturable
        betas = (cfg.adam_beta1, cfg.adam_beta2)
        self.critic_optimizer = torch.optim.AdamW(
            self.qf.parameters(), lr=cfg.critic_lr, betas=betas, weight_decay=cfg.weight_decay,
            fused=self._fused, capturable=capturable,
        )  # fmt: skip
        self.actor_optimizer = torch.optim.AdamW(
            self.actor.parameters(), lr=cfg.actor_lr, betas=betas, weight_decay=cfg.weight_decay,
            fused=self._fused, capturable=capturable,
        )  # fmt: skip
        self.alpha_optimizer = torch.optim.Adam(
            [self.log_alpha], lr=cfg.alpha_lr, betas=betas, fused=self._fused, capturable=capturable
        )

    @property
    def optimizers(self) -> tuple[torch.optim.Optimizer, ...]:
        """The actor's, the critics' and alpha's optimizers."""
        return self.actor_optimizer, self.critic_optimizer, self.alpha_optimizer

    def critic_params(self) -> Iterator[Tensor]:
        """What the critic step trains: the critics' parameters, then ``log_alpha``."""
        yield from self.qf.parameters()
        yield self.log_alpha

    def state_dict(self) -> dict[str, Any]:
        """Networks, targets, ``log_alpha`` and optimizers (the tensors are live, not copies)."""
        return {
            "actor": self.actor.state_dict(),
            "qf": self.qf.state_dict(),
            "qf_target": self.qf_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
        }

    @torch.no_grad()
    def copy_from(self, other: SACModel) -> None:
        """Take ``other``'s weights and optimizer state in place, every tensor keeping its identity.

        Steps compiled or captured on this model stay valid (Note [Compile in the background]).

        ``other`` must be built like this model (same dims, settings, ``capturable`` and ``fused``).
        Optimizer state this model has where ``other`` has none yet (a param never stepped) is set to
        what a first step would create: a zero step count and zero moments.
        """
        for mine, theirs in (
            (self.actor, other.actor),
            (self.qf, other.qf),
            (self.qf_target, other.qf_target),
        ):
            mine.load_state_dict(theirs.state_dict())  # copies into the existing tensors
        self.log_alpha.copy_(other.log_alpha)
        for mine_opt, their_opt in zip(self.optimizers, other.optimizers, strict=True):
            for mine_group, their_group in zip(mine_opt.param_groups, their_opt.param_groups, strict=True):
                for key, value in their_group.items():
                    if key not in ("params", "capturable", "fused"):
                        mine_group[key] = value
                for p, q in zip(mine_group["params"], their_group["params"], strict=True):
                    state, source = mine_opt.state.get(p, {}), their_opt.state.get(q, {})
                    if source and set(source) != set(state):
                        raise RuntimeError(
                            f"optimizer state keys differ ({sorted(state)} vs {sorted(source)}): "
                            "the models were not built alike"
                        )
                    for key, tensor in state.items():
                        if source:
                            tensor.copy_(source[key])
                        else:
                            tensor.zero_()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict``; the optimizers keep this model's ``fused`` and ``capturable``.

        Nothing restored aliases ``state``: torch's ``Optimizer.load_state_dict`` keeps the given
        tensors where their device and dtype already fit, so two models loaded from one dict (or from a
        live model's ``state_dict()``) would step one another's moments and step counts; the optimizer
        states are copied first.
        """
        self.actor.load_state_dict(state["actor"])
        self.qf.load_state_dict(state["qf"])
        self.qf_target.load_state_dict(state["qf_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_optimizer.load_state_dict(copy.deepcopy(state["actor_optimizer"]))
        self.critic_optimizer.load_state_dict(copy.deepcopy(state["critic_optimizer"]))
        self.alpha_optimizer.load_state_dict(copy.deepcopy(state["alpha_optimizer"]))
        for optimizer in self.optimizers:
            for group in optimizer.param_groups:  # a checkpoint carries its writer's settings
                group["capturable"] = self._capturable
                group["fused"] = self._fused
