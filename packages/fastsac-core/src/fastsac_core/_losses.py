"""The FastSAC losses, top to bottom: functions of a batch, the networks and ``log_alpha``.

Update rules follow holosoma FastSAC (``fast_sac_agent.py``, see wiki/algorithm.md):
  * every critic i is trained by cross-entropy against the C51 projection of ITS OWN target
    critic's distribution at (s', a' ~ pi(s')), the entropy folded into the reward before projection:
    r - discount * bootstrap * alpha * log pi(a'|s');
  * alpha is tuned inside the critic step from the next-state log-probs;
  * actor loss = alpha * log pi(a|s) - mean_i E[Q_i(s, a)], every ``policy_frequency`` critic updates.

The functions only compute: the caller zeroes gradients, holds autocast around them, runs backward
and steps the optimizers (``_steps``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812 - the conventional name
from torch import Tensor

from ._networks import Actor, DistributionalCritic
from ._replay import Batch

__all__ = ["actor_loss", "critic_loss"]


def critic_loss(
    batch: Batch,
    next_noise: Tensor,
    *,
    actor: Actor,
    qf: DistributionalCritic,
    qf_target: DistributionalCritic,
    log_alpha: Tensor,
    target_entropy: float,
    autotune: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """The critics' and alpha's losses of one minibatch: ``(qf_loss, alpha_loss, qf_max)``.

    ``next_noise`` is the standard-normal noise of a' ~ pi(s'); ``qf_max`` (no gradient) is the
    largest expected value of the projected targets.
    """
    with torch.no_grad():
        next_actions, next_log_probs, _ = actor.sample(batch.next_obs, next_noise)
        alpha = log_alpha.exp()
        soft_rewards = batch.rewards - batch.discount * batch.bootstrap * alpha * next_log_probs
        next_probs = F.softmax(qf_target(batch.next_critic_obs, next_actions).float(), dim=-1)
        target_dist = qf.project(next_probs, soft_rewards, batch.bootstrap * batch.discount)
        qf_max = qf.expected_value(target_dist).max()
    qf_log_probs = F.log_softmax(qf(batch.critic_obs, batch.actions).float(), dim=-1)
    qf_losses = -(target_dist * qf_log_probs).sum(-1)  # (num_q, B)
    # Weighted mean over the batch (divided by B, not by sum(valid), so it stays linear in the
    # samples and averaging gradients over ranks equals the full-batch gradient); summed over critics.
    qf_loss = (qf_losses * batch.valid).mean(-1).sum()
    if autotune:
        alpha_loss = -(log_alpha.exp() * (next_log_probs.float() + target_entropy)).mean()
    else:
        alpha_loss = torch.zeros((), device=qf_loss.device)
    return qf_loss, alpha_loss, qf_max


def actor_loss(
    batch: Batch, noise: Tensor, *, actor: Actor, qf: DistributionalCritic, log_alpha: Tensor
) -> tuple[Tensor, Tensor]:
    """The actor's loss of one minibatch and the log-probs of its sampled actions (``noise``: a ~ pi(s))."""
    actions, log_probs, _ = actor.sample(batch.obs, noise)
    # Critic weights are detached: only the actor's parameters get gradients.
    q_probs = F.softmax(qf(batch.critic_obs, actions, detach_params=True).float(), dim=-1)
    qf_value = qf.expected_value(q_probs).mean(0)  # mean over critics, (B,)
    alpha = log_alpha.detach().exp()
    loss = (alpha * log_probs.float() - qf_value).mean()
    return loss, log_probs
