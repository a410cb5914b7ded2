"""EmpiricalNormalizer: running statistics, the exact k-shard merge, a zero count."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fastsac_core import EmpiricalNormalizer, merge_normalizers


def _data(seed: int, rows: int, dim: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    # A large offset and uneven scales (mean/std up to 1e3): variance from raw sums of squares would
    # lose ~6 digits here; the shifted sums lose about eps64 * (mean/std)^2 ~ 1e-10 in the first merge.
    return 1000.0 + torch.randn(rows, dim, generator=g) * torch.linspace(1.0, 50.0, dim)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_k_shard_merge_equals_one_normalizer_over_the_union(k: int) -> None:
    """Shards (k of them) fed uneven batches over several merge rounds equal one normalizer fed all."""
    dim = 7
    shards = [EmpiricalNormalizer(dim, eps=1e-2) for _ in range(k)]
    single = EmpiricalNormalizer(dim, eps=1e-2)
    union = []
    for round_ in range(4):
        for i, shard in enumerate(shards):
            for j in range(i % 3):  # shard 0 sees nothing: an empty contribution must be harmless
                x = _data(100 * round_ + 10 * i + j, 5 + 17 * j + i, dim)
                shard.accumulate(x)
                single(x, update=True)
                union.append(x)
        merge_normalizers(shards)
        everything = torch.cat(union).double().numpy()
        for shard in shards:
            torch.testing.assert_close(shard.count, single.count, rtol=0, atol=0)
            torch.testing.assert_close(shard.mean64, single.mean64, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(shard.m2, single.m2, rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(shard.mean64.numpy(), everything.mean(0), rtol=1e-12)
            np.testing.assert_allclose(shard.std.numpy(), everything.std(0), rtol=1e-6)


def test_zero_count_is_finite_and_identity_like() -> None:
    """Before any sample (and after merging nothing) the stats are mean 0, std 1, all finite."""
    norm = EmpiricalNormalizer(3, eps=0.5)
    merge_normalizers([norm, EmpiricalNormalizer(3, eps=0.5)])
    x = torch.tensor([[1.5, -3.0, 0.0]])
    out = norm(x)
    assert torch.isfinite(norm.mean).all() and torch.isfinite(norm.std).all()
    torch.testing.assert_close(out, x / 1.5)


def test_single_sample_has_zero_variance_not_nan() -> None:
    """One sample gives std 0 (normalised by eps), never NaN."""
    norm = EmpiricalNormalizer(2, eps=0.1)
    out = norm(torch.tensor([[2.0, 4.0]]), update=True)
    assert torch.equal(norm.std, torch.zeros(2))
    torch.testing.assert_close(out, torch.zeros(1, 2))


def test_update_flag_and_disabled() -> None:
    """update=False leaves the stats alone; a disabled normalizer is the identity and never updates."""
    norm = EmpiricalNormalizer(2)
    norm(torch.randn(10, 2), update=False)
    assert float(norm.count) == 0
    off = EmpiricalNormalizer(2, enabled=False)
    x = torch.randn(4, 2) * 9
    assert torch.equal(off(x, update=True), x) and float(off.count) == 0


def test_state_dict_round_trip() -> None:
    """A normalizer restored from a state dict normalises identically and keeps merging exactly."""
    a = EmpiricalNormalizer(4)
    a(_data(1, 50, 4), update=True)
    b = EmpiricalNormalizer(4)
    b.load_state_dict(a.state_dict())
    x = _data(2, 9, 4)
    assert torch.equal(a(x, update=True), b(x, update=True))
    assert torch.equal(a.m2, b.m2)
