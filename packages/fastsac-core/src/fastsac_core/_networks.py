"""The actor and the ensemble of distributional (C51) critics.

Architecture (holosoma FastSAC, ``fast_sac.py``): MLPs ``h -> h/2 -> h/4`` with LayerNorm and SiLU;
the actor has zero-initialised mean and log-std heads, its log-std is tanh-mapped into
``[log_std_min, log_std_max]`` and its Gaussian sample is squashed by tanh and scaled to the action
bounds. The critics output logits over ``num_atoms`` atoms spread evenly on ``[v_min, v_max]``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F  # noqa: N812 - the conventional name
from torch import Tensor, nn

__all__ = ["Actor", "DistributionalCritic", "project_distribution"]

_LOG_2 = math.log(2.0)


def _hidden_widths(hidden_dim: int) -> tuple[int, int, int]:
    return hidden_dim, hidden_dim // 2, hidden_dim // 4


class Actor(nn.Module):
    """Tanh-squashed Gaussian policy scaled to per-dimension action bounds.

    Args:
        obs_dim: Length of the (normalised) actor observation.
        act_dim: Length of the action.
        hidden_dim: Width of the first hidden layer (then ``h/2`` and ``h/4``).
        action_low: Per-dimension lower action bound.
        action_high: Per-dimension upper action bound.
        log_std_min: Lowest log standard deviation.
        log_std_max: Highest log standard deviation.
        use_layer_norm: LayerNorm after every hidden linear layer.
    """

    action_scale: Tensor
    action_bias: Tensor

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_dim: int,
        action_low: tuple[float, ...] | Tensor,
        action_high: tuple[float, ...] | Tensor,
        log_std_min: float,
        log_std_max: float,
        use_layer_norm: bool = True,
    ) -> None:
        super().__init__()
        h1, h2, h3 = _hidden_widths(hidden_dim)
        layers: list[nn.Module] = []
        for d_in, d_out in ((obs_dim, h1), (h1, h2), (h2, h3)):
            layers += [
                nn.Linear(d_in, d_out),
                nn.LayerNorm(d_out) if use_layer_norm else nn.Identity(),
                nn.SiLU(),
            ]
        self.net = nn.Sequential(*layers)
        self.fc_mean = nn.Linear(h3, act_dim)
        self.fc_log_std = nn.Linear(h3, act_dim)
        for head in (self.fc_mean, self.fc_log_std):
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)
        self.log_std_min = float(log_std_min)
        self.log_std_max = float(log_std_max)
        low = torch.as_tensor(action_low, dtype=torch.float32)
        high = torch.as_tensor(action_high, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    def distribution_params(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and log standard deviation of the pre-tanh Gaussian, each ``(B, act_dim)``."""
        x = self.net(obs)
        mean = self.fc_mean(x)
        log_std = torch.tanh(self.fc_log_std(x))
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (log_std + 1.0)
        return mean, log_std

    def _squash(self, raw: Tensor) -> Tensor:
        return torch.tanh(raw) * self.action_scale + self.action_bias

    def sample(self, obs: Tensor, noise: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Reparameterised sample for training.

        Args:
            obs: ``(B, obs_dim)`` normalised observations.
            noise: Optional ``(B, act_dim)`` standard-normal noise; drawn here when ``None``.

        Returns:
            ``(action, log_prob, mean_action)``: the action in bounds, ``log pi(action | obs)`` of shape
            ``(B,)`` (tanh and scale Jacobians included), and the squashed mean action.
        """
        mean, log_std = self.distribution_params(obs)
        if noise is None:
            noise = torch.randn_like(mean)
        raw = mean + log_std.exp() * noise
        # Gaussian log-density of raw, minus log|d action / d raw| = log(1 - tanh(raw)^2) + log(scale).
        # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)) is the stable form of holosoma's
        # log(1 - tanh(u)^2 + 1e-6).
        gaussian = -0.5 * noise.pow(2) - log_std - 0.5 * math.log(2.0 * math.pi)
        log_det_tanh = 2.0 * (_LOG_2 - raw - F.softplus(-2.0 * raw))
        log_prob = (gaussian - log_det_tanh - torch.log(self.action_scale)).sum(-1)
        return self._squash(raw), log_prob, self._squash(mean)

    def forward(self, obs: Tensor, deterministic: bool = False) -> Tensor:
        """Actions in bounds: the squashed mean when ``deterministic``, else a sample."""
        mean, log_std = self.distribution_params(obs)
        if deterministic:
            return self._squash(mean)
        return self._squash(mean + log_std.exp() * torch.randn_like(mean))

    @torch.no_grad()
    def explore(self, obs: Tensor) -> Tensor:
        """Sampled actions for collection (no autograd graph)."""
        return self.forward(obs, deterministic=False)


class _EnsembleLinear(nn.Module):
    """``E`` independent linear layers evaluated with one batched matmul: ``(E, B, in) -> (E, B, out)``."""

    def __init__(self, ensemble: int, d_in: int, d_out: int) -> None:
        super().__init__()
        # Same initialisation as nn.Linear, member by member: U(-1/sqrt(in), 1/sqrt(in)).
        bound = 1.0 / math.sqrt(d_in)
        self.weight = nn.Parameter(torch.empty(ensemble, d_in, d_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(ensemble, 1, d_out).uniform_(-bound, bound))

    def forward(self, x: Tensor, detach_params: bool = False) -> Tensor:
        w, b = (self.weight.detach(), self.bias.detach()) if detach_params else (self.weight, self.bias)
        return torch.baddbmm(b, x, w)


class _EnsembleLayerNorm(nn.Module):
    """LayerNorm with a separate affine transform per ensemble member."""

    def __init__(self, ensemble: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ensemble, 1, dim))
        self.bias = nn.Parameter(torch.zeros(ensemble, 1, dim))

    def forward(self, x: Tensor, detach_params: bool = False) -> Tensor:
        w, b = (self.weight.detach(), self.bias.detach()) if detach_params else (self.weight, self.bias)
        return F.layer_norm(x, (x.shape[-1],)) * w + b


class DistributionalCritic(nn.Module):
    """An ensemble of ``num_q_networks`` C51 critics evaluated together.

    Each member is its own MLP ``(obs, action) -> h -> h/2 -> h/4 -> num_atoms`` (weights stacked along
    a leading ensemble axis, so one batched matmul runs all members).

    Args:
        obs_dim: Length of the (normalised) critic observation.
        act_dim: Length of the action.
        hidden_dim: Width of the first hidden layer.
        num_atoms: Atoms of the categorical return distribution.
        v_min: Lowest atom.
        v_max: Highest atom.
        num_q_networks: Ensemble size.
        use_layer_norm: LayerNorm after every hidden linear layer.
    """

    q_support: Tensor

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_dim: int,
        num_atoms: int,
        v_min: float,
        v_max: float,
        num_q_networks: int = 2,
        use_layer_norm: bool = True,
    ) -> None:
        super().__init__()
        h1, h2, h3 = _hidden_widths(hidden_dim)
        e = num_q_networks
        self.num_q_networks = num_q_networks
        self.linears = nn.ModuleList(
            [_EnsembleLinear(e, d_in, d_out) for d_in, d_out in ((obs_dim + act_dim, h1), (h1, h2), (h2, h3))]
        )
        self.norms = (
            nn.ModuleList([_EnsembleLayerNorm(e, d) for d in (h1, h2, h3)]) if use_layer_norm else None
        )
        self.head = _EnsembleLinear(e, h3, num_atoms)
        self.v_min = float(v_min)
        self.v_max = float(v_max)
        self.register_buffer("q_support", torch.linspace(v_min, v_max, num_atoms))

    def forward(self, obs: Tensor, actions: Tensor, detach_params: bool = False) -> Tensor:
        """Logits ``(num_q_networks, B, num_atoms)``.

        Args:
            obs: ``(B, obs_dim)`` normalised critic observations.
            actions: ``(B, act_dim)`` actions.
            detach_params: Use detached weights (the actor step differentiates through the critics'
                inputs only, so no critic weight gradient is computed).
        """
        x = torch.cat([obs, actions], dim=-1).unsqueeze(0).expand(self.num_q_networks, -1, -1)
        for i, linear in enumerate(self.linears):
            x = linear(x, detach_params)
            if self.norms is not None:
                x = self.norms[i](x, detach_params)
            x = F.silu(x)
        logits: Tensor = self.head(x, detach_params)
        return logits

    def expected_value(self, probs: Tensor) -> Tensor:
        """``E[Z] = sum_k p_k z_k`` over the last axis."""
        value: Tensor = (probs * self.q_support).sum(-1)
        return value

    def project(self, next_probs: Tensor, rewards: Tensor, discount: Tensor) -> Tensor:
        """C51 projection of ``rewards + discount * Z`` onto the support; see ``project_distribution``."""
        return project_distribution(next_probs, rewards, discount, self.q_support)


def project_distribution(next_probs: Tensor, rewards: Tensor, discount: Tensor, support: Tensor) -> Tensor:
    """Project the shifted distribution ``rewards + discount * z`` back onto the fixed support.

    Each atom's mass is split linearly between the two support atoms that bracket its (clipped)
    target position; mass that lands exactly on an atom stays there, so total mass is conserved.

    Args:
        next_probs: ``(..., B, K)`` probabilities of the next-state distributions.
        rewards: ``(B,)`` rewards (already n-step and entropy-shifted).
        discount: ``(B,)`` ``gamma^n * bootstrap`` (zero at terminal transitions).
        support: ``(K,)`` evenly spaced atoms ``v_min .. v_max``.

    Returns:
        ``(..., B, K)`` projected probabilities (float32).
    """
    num_atoms = support.shape[0]
    v_min, v_max = support[0], support[-1]
    delta_z = (v_max - v_min) / (num_atoms - 1)
    target_z = (rewards.float().unsqueeze(-1) + discount.float().unsqueeze(-1) * support).clamp(v_min, v_max)
    b = (target_z - v_min) / delta_z  # fractional atom index in [0, K-1]
    lower = b.floor().clamp(max=num_atoms - 1)
    upper_weight = b - lower  # 0 when b sits on an atom (then everything goes to `lower`)
    upper = (lower + 1).clamp(max=num_atoms - 1)
    probs = next_probs.float()
    shape = probs.shape
    lower_idx = lower.long().expand(shape)
    upper_idx = upper.long().expand(shape)
    projected = torch.zeros_like(probs)
    projected.scatter_add_(-1, lower_idx, probs * (1.0 - upper_weight))
    projected.scatter_add_(-1, upper_idx, probs * upper_weight)
    return projected
