"""``trainer eval`` and ``trainer export``: a checkpoint's deterministic policy, run and exported to ONNX."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from fastsac_async.run_layout import RunLayout
from fastsac_core import save_checkpoint
from fastsac_core.testing import make_agent
from fastsac_trainer.config.exceptions import TrainerAppError
from fastsac_trainer.evaluate import eval_main, evaluate, load_policy
from fastsac_trainer.export import export_main
from fastsac_trainer.tasks import get_task, probe_dims


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder with one pendulum checkpoint whose actor and normalizer are far from their init."""
    spec = get_task("pendulum")
    factory = spec.env_factory()
    dims = probe_dims(factory)
    agent = make_agent(dims, spec.agent_config(), "cpu", num_envs=2)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in agent.model.actor.parameters():
            param.add_(0.5 * torch.randn(param.shape, generator=generator))
    agent.obs_normalizer(3.0 * torch.randn(256, dims.obs_dim, generator=generator) + 1.0, update=True)
    folder = tmp_path_factory.mktemp("run")
    RunLayout(folder).config.write_text(
        f"task:\n  name: pendulum\n  env_id: {spec.env_id}\n  max_episode_steps: {spec.max_episode_steps}\n"
    )
    save_checkpoint(RunLayout(folder).checkpoint(7), agent, extra={"iteration": 7})
    return folder


def test_export_matches_the_checkpoint_policy(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ONNX Runtime on the exported file gives the checkpoint's deterministic actions within 1e-5."""
    out = tmp_path / "policy.onnx"
    assert export_main([f"checkpoint={run_dir}", "format=onnx", f"out={out}"]) == 0
    assert f"-> {out}" in capsys.readouterr().out
    policy, meta = load_policy(RunLayout(run_dir).checkpoint(7))
    obs = (4.0 * torch.randn(64, meta["dims"]["obs_dim"], generator=torch.Generator().manual_seed(1))).float()
    expected = policy(obs).numpy()
    runtime = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (got,) = runtime.run(None, {"obs": obs.numpy()})
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    # The normalizer matters: without it the actions differ.
    raw = policy.actor(obs, deterministic=True).detach().numpy()
    assert np.abs(raw - expected).max() > 1e-3
    sidecar = (tmp_path / "policy.onnx.json").read_text()
    assert '"obs_dim": 4' in sidecar and '"normalizer_folded": true' in sidecar


def test_the_sidecar_names_the_task_and_env(run_dir: Path, tmp_path: Path) -> None:
    """The ONNX sidecar names the run's task and env (its config.yaml); a checkpoint of no run names none."""
    out = tmp_path / "policy.onnx"
    assert export_main([f"checkpoint={run_dir}", f"out={out}"]) == 0
    spec = get_task("pendulum")
    assert json.loads((tmp_path / "policy.onnx.json").read_text())["task"] == {
        "name": "pendulum",
        "env_id": spec.env_id,
        "env_factory": None,
        "env_kwargs": None,
        "env_import": None,
        "max_episode_steps": spec.max_episode_steps,
    }
    loose = shutil.copy(RunLayout(run_dir).checkpoint(7), tmp_path / "loose.pt")
    assert export_main([f"checkpoint={loose}"]) == 0
    assert json.loads((tmp_path / "loose.onnx.json").read_text())["task"] is None


def test_eval_prints_the_mean_return(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The eval command runs N episodes of the run's env and prints their mean return.

    InvertedPendulum-v5 pays +1 per step and 0 on the step that falls, so each return is its
    length (time limit) or its length - 1 (fell).
    """
    assert eval_main([f"checkpoint={run_dir}", "episodes=3", "seed=5"]) == 0
    line = capsys.readouterr().out.strip()
    policy, _ = load_policy(RunLayout(run_dir).checkpoint(7))
    result = evaluate(policy, get_task("pendulum").env_factory(), 3, seed=5)
    assert len(result.returns) == 3
    assert all(r in (n, n - 1) for r, n in zip(result.returns, result.lengths, strict=True))
    assert f"mean return {result.mean_return:.2f}" in line
    assert "over 3 episodes" in line


def test_eval_runs_its_episodes_on_one_torch_thread_and_gives_the_threads_back(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``trainer eval`` steps its policy on one torch thread and leaves the caller's thread count be."""
    import fastsac_trainer.evaluate as evaluate_module

    seen: list[int] = []
    real = evaluate_module.evaluate_policy

    def counting(*args: object, **kwargs: object) -> object:
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(evaluate_module, "evaluate_policy", counting)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert eval_main([f"checkpoint={run_dir}", "episodes=2"]) == 0
        assert seen == [1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert "over 2 episodes" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["episodes=3"], "checkpoint is missing"),
        (["checkpoint=/nonexistent/run"], "checkpoint='/nonexistent/run' is invalid: no such file"),
        (["checkpoint={run}", "episodes=0"], "episodes='0' is invalid"),
        (["checkpoint={run}", "bogus=1"], "bogus='1' is not an option of `trainer eval`"),
        (["checkpoint={run}", "nokv"], "malformed argument 'nokv'"),
        (["checkpoint={run}", "device=tpu"], "device='tpu' is invalid: use cpu, cuda or cuda:N"),
        (["checkpoint={run}", "device=cuda:99"], "device='cuda:99' is invalid: "),
        (["checkpoint={run}", "video_out=z.gif"], "video_out='z.gif' is invalid without video=true"),
    ],
)
def test_eval_bad_arguments(run_dir: Path, args: list[str], message: str) -> None:
    """Bad eval arguments raise one-line errors naming the argument."""
    with pytest.raises(TrainerAppError) as info:
        eval_main([a.format(run=run_dir) for a in args])
    assert message in str(info.value) and "\n" not in str(info.value)


def test_export_refuses_unknown_format(run_dir: Path) -> None:
    """format=tflite is refused with the supported format named."""
    with pytest.raises(TrainerAppError, match="format='tflite' is invalid: use format=onnx"):
        export_main([f"checkpoint={run_dir}", "format=tflite"])


def test_export_never_writes_over_a_checkpoint(run_dir: Path) -> None:
    """out= naming the checkpoint itself (any file not ending in .onnx) is refused; the file is unchanged."""
    checkpoint = sorted((run_dir / "checkpoints").glob("model_*.pt"))[-1]
    before = checkpoint.read_bytes()
    with pytest.raises(TrainerAppError, match=r"an ONNX model's file ends in \.onnx; e\.g\. out=model_"):
        export_main([f"checkpoint={run_dir}", f"out={checkpoint}"])
    assert checkpoint.read_bytes() == before
