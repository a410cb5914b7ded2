"""Actor and C51 critic ensemble: bounds, log-probs, initialisation, projection properties."""

from __future__ import annotations

import torch
from torch import distributions as D  # noqa: N812

from fastsac_core._networks import Actor, DistributionalCritic, project_distribution


def _actor() -> Actor:
    return Actor(5, 3, 32, (-1.0, -2.0, 0.0), (1.0, 2.0, 1.0), -5.0, 0.0, True)


def test_zero_initialised_heads() -> None:
    """A fresh actor's mean action is the middle of the bounds and its log-std the middle of its range."""
    actor = _actor()
    mean, log_std = actor.distribution_params(torch.randn(4, 5))
    assert torch.equal(mean, torch.zeros(4, 3))
    torch.testing.assert_close(log_std, torch.full((4, 3), -2.5))
    torch.testing.assert_close(
        actor(torch.randn(4, 5), deterministic=True), torch.tensor([[0.0, 0.0, 0.5]] * 4)
    )


def test_actions_in_bounds_and_log_prob_matches_torch_distributions() -> None:
    """Sampled actions stay within the bounds and log pi equals the tanh-transformed Normal's density."""
    torch.manual_seed(0)
    actor = _actor()
    with torch.no_grad():
        for p in actor.parameters():
            p.normal_(0, 0.5)
    obs, noise = torch.randn(256, 5), torch.randn(256, 3)
    action, log_prob, mean_action = actor.sample(obs, noise)
    assert torch.all(action >= actor.action_bias - actor.action_scale)
    assert torch.all(action <= actor.action_bias + actor.action_scale)
    mean, log_std = actor.distribution_params(obs)
    ref = D.TransformedDistribution(
        D.Normal(mean, log_std.exp()),
        [D.TanhTransform(), D.AffineTransform(actor.action_bias, actor.action_scale)],
    )
    raw = mean + log_std.exp() * noise
    ref_action = torch.tanh(raw) * actor.action_scale + actor.action_bias
    torch.testing.assert_close(action, ref_action)
    keep = torch.tanh(raw).abs().amax(-1) < 0.999  # the reference's inverse tanh is unstable at the edges
    torch.testing.assert_close(log_prob[keep], ref.log_prob(ref_action).sum(-1)[keep], rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(mean_action, torch.tanh(mean) * actor.action_scale + actor.action_bias)


def test_ensemble_members_are_independent_mlps() -> None:
    """Member i of the stacked critic equals a plain MLP built from member i's weights."""
    torch.manual_seed(1)
    critic = DistributionalCritic(4, 2, 16, 11, -1.0, 1.0, num_q_networks=3)
    obs, act = torch.randn(5, 4), torch.randn(5, 2)
    logits = critic(obs, act)
    assert logits.shape == (3, 5, 11)
    for i in range(3):
        x = torch.cat([obs, act], -1)
        for j, linear in enumerate(critic.linears):
            x = x @ linear.weight[i] + linear.bias[i]
            norm = critic.norms[j]  # type: ignore[index]
            x = torch.nn.functional.silu(
                torch.nn.functional.layer_norm(x, (x.shape[-1],)) * norm.weight[i] + norm.bias[i]
            )
        torch.testing.assert_close(logits[i], x @ critic.head.weight[i] + critic.head.bias[i])
    assert not torch.equal(logits[0], logits[1])  # initialised independently


def test_projection_conserves_mass_and_mean_in_range() -> None:
    """Projected mass sums to one, is non-negative, and keeps E[r + d z] when no atom is clipped."""
    torch.manual_seed(2)
    support = torch.linspace(-10, 10, 51)
    probs = torch.softmax(torch.randn(2, 64, 51), -1)
    rewards, discount = torch.randn(64), torch.rand(64) * 0.5  # r + d z stays inside [-10, 10]
    out = project_distribution(probs, rewards, discount, support)
    torch.testing.assert_close(out.sum(-1), torch.ones(2, 64))
    assert torch.all(out >= 0)
    want = rewards + discount * (probs * support).sum(-1)
    torch.testing.assert_close((out * support).sum(-1), want, rtol=1e-5, atol=1e-5)


def test_projection_clips_to_the_support() -> None:
    """Targets beyond v_max (v_min) put all mass on the last (first) atom; terminal targets are one-hot."""
    support = torch.linspace(-1, 1, 5)
    probs = torch.softmax(torch.randn(1, 3, 5), -1)
    out = project_distribution(
        probs, torch.tensor([50.0, -50.0, 0.5]), torch.tensor([1.0, 1.0, 0.0]), support
    )
    torch.testing.assert_close(out[0, 0], torch.tensor([0.0, 0, 0, 0, 1]))
    torch.testing.assert_close(out[0, 1], torch.tensor([1.0, 0, 0, 0, 0]))
    torch.testing.assert_close(out[0, 2], torch.tensor([0.0, 0, 0, 1, 0]))  # 0.5 is an atom
