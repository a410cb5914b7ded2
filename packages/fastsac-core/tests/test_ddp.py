"""DDP equivalence: 2 gloo ranks on half batches match one process on the full batch.

Tolerance: the ranks compute the same math on the same samples and noise, but in a different
float32 summation order (two half-batch means averaged by the all-reduce instead of one full-batch
mean), so results differ by float32 rounding. Over 12 critic and 6 actor updates we allow 1e-5
absolute + 1e-4 relative on every parameter: the observed difference is ~3e-8, while dropping the
gradient all-reduce moves parameters by ~2e-3 (one Adam step is up to lr = 3e-4). Normalizer
statistics are float64 sums and must agree to 1e-9.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from fastsac_core.testing import config_fields, run_ddp_rank, run_processes, tiny_config

CALLS, NUM_UPDATES = 3, 4


def _compare(single: dict[str, Any], ranks: list[dict[str, Any]]) -> None:
    for rank in ranks:
        for key in ("actor", "qf", "qf_target", "log_alpha"):
            torch.testing.assert_close(rank[key], single[key], atol=1e-5, rtol=1e-4, msg=key)
        for key in ("obs_normalizer", "critic_obs_normalizer"):
            for name, value in single[key].items():
                torch.testing.assert_close(rank[key][name], value, atol=1e-9, rtol=1e-9, msg=f"{key}.{name}")
    # Per-rank losses are means over the rank's half: their average is the full-batch loss.
    for call in range(CALLS):
        mean_loss = sum(r["metrics"][call]["qf_loss"] for r in ranks) / len(ranks)
        torch.testing.assert_close(mean_loss, single["metrics"][call]["qf_loss"], atol=1e-5, rtol=1e-4)


def _run_ranks(
    tmp_path: Path, args: tuple[Any, ...], device: str, shared_obs: bool = False
) -> list[dict[str, Any]]:
    code = (
        "import json, sys; from fastsac_core import testing; testing.run_ddp_rank(*json.loads(sys.argv[1]))"
    )
    ranks = [
        [r, 2, str(tmp_path / "rdzv"), str(tmp_path / f"rank{r}.pt"), *args, device, shared_obs]
        for r in range(2)
    ]
    assert run_processes([[sys.executable, "-c", code, json.dumps(rank)] for rank in ranks]) == [0, 0]
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize("shared_obs", [False, True], ids=["own_critic_obs", "critic_observes_obs"])
def test_two_gloo_ranks_match_one_process(tmp_path: Path, shared_obs: bool) -> None:
    """Params, targets, alpha, normalizers of 2 gloo ranks on half batches equal 1 process on the full one."""
    fields = config_fields(tiny_config(batch_size=64, policy_frequency=2))
    args = (fields, CALLS, NUM_UPDATES, 7)
    run_ddp_rank(0, 1, str(tmp_path / "unused"), str(tmp_path / "single.pt"), *args, "cpu", shared_obs)
    single = torch.load(tmp_path / "single.pt", weights_only=True)
    ranks = _run_ranks(tmp_path, args, "cpu", shared_obs)
    _compare(single, ranks)
    # and the ranks agree with each other exactly (same reduced gradients, same optimizer math)
    for key in ("actor", "qf", "log_alpha"):
        assert torch.equal(ranks[0][key], ranks[1][key]), key


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
@pytest.mark.parametrize(
    ("capture", "compile_"),
    [(False, False), (True, False), (True, True)],
    ids=["ranks_without_graphs", "all_reduce_captured", "all_reduce_captured_compiled"],
)
def test_two_nccl_ranks_match_one_gpu(tmp_path: Path, capture: bool, compile_: bool) -> None:
    """The same equivalence over NCCL on 2 GPUs (fp32) against 1 GPU; captured steps hold the all-reduce."""
    cfg = tiny_config(
        batch_size=64, policy_frequency=2, amp=False, capture_all_reduce=capture, compile=compile_
    )
    args = (config_fields(cfg), CALLS, NUM_UPDATES, 7)
    ranks = _run_ranks(tmp_path, args, "cuda")
    run_ddp_rank(0, 1, str(tmp_path / "unused"), str(tmp_path / "single.pt"), *args, "cuda")
    single = torch.load(tmp_path / "single.pt", weights_only=True)
    assert single["step_graphs"] == [True, True]  # one GPU always replays whole-step graphs
    assert [r["step_graphs"] for r in ranks] == [[capture, capture]] * 2
    _compare(single, ranks)
