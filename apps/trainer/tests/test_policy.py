"""``from fastsac_trainer import load_policy``: a run's policy acts on numpy and torch as `trainer eval`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fastsac_async import RunLayout
from fastsac_trainer import Policy, TrainerAppError, load_policy, train
from fastsac_trainer.evaluate import load_policy as eval_policy
from fastsac_trainer.testing import TINY_PENDULUM


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny synchronous pendulum run: checkpoints at iterations 3 and 6, ``best.pt`` of its evaluations."""
    runs = tmp_path_factory.mktemp("runs")
    result = train(
        "pendulum",
        overrides=[
            *TINY_PENDULUM,
            "algo.trainer.asynchronous=false",
            "algo.trainer.device=cpu",
            "algo.trainer.num_learning_iterations=6",
            "algo.trainer.save_interval=3",
            "algo.trainer.eval_interval_s=null",
            "algo.trainer.eval_interval=3",
            "algo.trainer.eval_episodes=2",
            f"runs_root={runs}",
            "run_name=tiny",
        ],
    )
    assert result.stop_reason == "completed"
    assert result.last_checkpoint == RunLayout(result.run_dir).checkpoint(6)
    return result.run_dir


def _observations(policy: Policy, batch: int) -> np.ndarray:
    """Observations far from the normalizer's statistics, so that normalizing them matters."""
    return (3.0 * np.random.default_rng(0).standard_normal((batch, policy.obs_dim)) + 1.0).astype(np.float32)


def test_act_gives_trainer_evals_actions_for_numpy_and_torch_one_or_batched(run_dir: Path) -> None:
    """Numpy in, numpy out; torch in, torch out; one obs or a batch: the actions `trainer eval` takes."""
    policy = load_policy(run_dir)
    reference, _ = eval_policy(RunLayout(run_dir).checkpoint(6))  # what `trainer eval` runs
    obs = _observations(policy, 5)
    expected = reference(torch.from_numpy(obs)).numpy()
    # One obs is a batch of one: its matmuls may round differently from a row of the batch of 5.
    expected_one = reference(torch.from_numpy(obs[2:3])).numpy()[0]

    batch = policy.act(obs)
    assert isinstance(batch, np.ndarray) and batch.dtype == np.float32 and batch.shape == (5, policy.act_dim)
    np.testing.assert_array_equal(batch, expected)
    one = policy.act(obs[2])
    assert isinstance(one, np.ndarray) and one.shape == (policy.act_dim,)
    np.testing.assert_array_equal(one, expected_one)
    np.testing.assert_array_equal(policy.act(obs[2].tolist()), expected_one)  # a list: numpy out

    tensors = policy.act(torch.from_numpy(obs).double())
    assert isinstance(tensors, torch.Tensor) and tensors.dtype == torch.float32
    assert tensors.shape == batch.shape
    np.testing.assert_array_equal(tensors.numpy(), expected)
    tensors.requires_grad_(True)  # a plain tensor, not an inference-mode one
    single = policy.act(torch.from_numpy(obs[2]))
    assert isinstance(single, torch.Tensor) and single.shape == (policy.act_dim,)
    np.testing.assert_array_equal(single.numpy(), expected_one)

    assert policy.deterministic and policy.device == torch.device("cpu")
    assert ((batch >= policy.action_low) & (batch <= policy.action_high)).all()
    # The normalizer is applied: the actor on the raw observations acts otherwise.
    raw = reference.actor(torch.from_numpy(obs), deterministic=True).detach().numpy()
    assert np.abs(raw - expected).max() > 1e-4


def test_load_policy_takes_a_run_folder_or_a_checkpoint_file(run_dir: Path) -> None:
    """A run folder gives its latest checkpoint; a file, itself, ``best.pt`` included."""
    layout = RunLayout(run_dir)
    assert load_policy(run_dir).checkpoint == layout.checkpoint(6)
    assert load_policy(str(layout.checkpoint(3))).checkpoint == layout.checkpoint(3)
    best = load_policy(layout.best_checkpoint)
    obs = _observations(best, 4)
    reference, _ = eval_policy(layout.best_checkpoint)
    np.testing.assert_array_equal(best.act(obs), reference(torch.from_numpy(obs)).numpy())


def test_a_stochastic_policy_samples(run_dir: Path) -> None:
    """deterministic=False samples: two calls on the same observations differ."""
    policy = load_policy(run_dir, deterministic=False)
    obs = _observations(policy, 8)
    assert not policy.deterministic and not np.array_equal(policy.act(obs), policy.act(obs))


@pytest.mark.parametrize(
    ("target", "kwargs", "message"),
    [
        ("{run}/nonexistent", {}, "checkpoint='{run}/nonexistent' is invalid: no such file or folder"),
        ("{run}/config.yaml", {}, "checkpoint='{run}/config.yaml' is invalid: "),
        ("{run}", {"device": "tpu"}, "device='tpu' is invalid: use cpu, cuda or cuda:N"),
        ("{run}", {"device": "cuda:64"}, "device='cuda:64' is invalid: "),
    ],
)
def test_mistakes_raise_one_line(run_dir: Path, target: str, kwargs: dict[str, str], message: str) -> None:
    """A missing path, a file that is no checkpoint and an unknown device each raise one line."""
    with pytest.raises(TrainerAppError) as info:
        load_policy(target.format(run=run_dir), **kwargs)  # type: ignore[arg-type]
    assert message.format(run=run_dir) in str(info.value) and "\n" not in str(info.value)


def test_an_observation_of_another_shape_is_refused(run_dir: Path) -> None:
    """An observation of the wrong length names its shape and the shapes the policy takes."""
    policy = load_policy(run_dir)
    with pytest.raises(ValueError, match=r"obs has shape \(3,\); this policy takes .* \(4,\) or .* \(B, 4\)"):
        policy.act(np.zeros(3))
    with pytest.raises(ValueError, match=r"obs has shape \(2, 2, 4\)"):
        policy.act(torch.zeros(2, 2, 4))


@pytest.mark.gpu
def test_a_policy_on_the_gpu_acts_as_on_the_cpu(run_dir: Path) -> None:
    """device='cuda': numpy in gives numpy out, a CUDA tensor a CUDA tensor, both the CPU's actions."""
    cpu, gpu = load_policy(run_dir), load_policy(run_dir, device="cuda")
    obs = _observations(cpu, 16)
    assert gpu.device.type == "cuda"
    np.testing.assert_allclose(gpu.act(obs), cpu.act(obs), atol=1e-5, rtol=0)
    on_gpu = gpu.act(torch.from_numpy(obs).cuda())
    assert on_gpu.device.type == "cuda"
    np.testing.assert_allclose(on_gpu.cpu().numpy(), cpu.act(obs), atol=1e-5, rtol=0)
