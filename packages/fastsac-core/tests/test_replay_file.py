"""The replay file: snapshots restore exactly, writes are atomic and off the caller's thread; episode cuts."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import fastsac_core._replay_file as replay_file
from fastsac_core import (
    CheckpointError,
    ReplayBuffer,
    ReplaySaver,
    discard_partial_checkpoints,
    load_replay,
    peek_replay,
    save_replay,
)


def _steps(k: int, num_envs: int, seed: int, *, end_prob: float = 0.3) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randn(k, num_envs, 3, generator=g),
        "critic_obs": torch.randn(k, num_envs, 5, generator=g),
        "actions": torch.randn(k, num_envs, 2, generator=g),
        "rewards": torch.randn(k, num_envs, generator=g),
        "terminated": torch.rand(k, num_envs, generator=g) < end_prob,
        "truncated": torch.rand(k, num_envs, generator=g) < end_prob,
    }


def _buffer(blocks: list[int] | None = None, capacity: int = 6, **kw: Any) -> ReplayBuffer:
    return ReplayBuffer(4, capacity, 3, 5, 2, n_steps=3, gamma=0.9, blocks=blocks, reward_bound=5.0, **kw)


def _ragged() -> ReplayBuffer:
    """Two blocks of two envs, one past the wrap (9 steps), one not (4 steps)."""
    buffer = _buffer([2, 2])
    buffer.extend_block(0, {k: v[:, :2] for k, v in _steps(9, 4, 0).items()})
    buffer.extend_block(1, {k: v[:, 2:] for k, v in _steps(4, 4, 1).items()})
    return buffer


def test_a_snapshot_restores_the_same_samples_on_the_same_random_stream(tmp_path: Path) -> None:
    """A buffer restored from its file (uneven blocks, one wrapped) samples exactly as the original."""
    original = _ragged()
    info = save_replay(tmp_path / "replay.pt", original.snapshot(), gstep=7, extra={"note": "x"})
    # Only the written rows are stored: 6 rows (wrapped) of block 0, 4 of block 1, 2 envs each.
    assert (info.gstep, info.transitions, info.extra) == (7, 6 * 2 + 4 * 2, {"note": "x"})
    restored = _buffer([2, 2])
    assert load_replay(tmp_path / "replay.pt", restored).transitions == 20
    assert restored.block_written == (9, 4)
    assert torch.equal(restored.reward_scale.running, original.reward_scale.running)
    torch.manual_seed(3)
    a = original.sample(5)
    torch.manual_seed(3)
    b = restored.sample(5)
    for name in ("obs", "actions", "rewards", "next_obs", "bootstrap", "discount", "valid"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert peek_replay(tmp_path / "replay.pt").gstep == 7


def test_a_snapshot_fits_another_block_layout_only_where_each_block_holds_one_count(tmp_path: Path) -> None:
    """Blocks may change (another collector count) when counts are even; uneven ones are refused by name."""
    even = _buffer([2, 2])
    for block in (0, 1):
        even.extend_block(block, {k: v[:, :2] for k, v in _steps(3, 4, block).items()})
    one_block = _buffer()
    one_block.restore(even.snapshot())
    assert one_block.block_written == (3,)
    save_replay(tmp_path / "r.pt", _ragged().snapshot(), gstep=1)
    with pytest.raises(CheckpointError, match=r"blocks \[2, 2\] hold different step counts \[9, 4\]"):
        load_replay(tmp_path / "r.pt", _buffer())
    with pytest.raises(CheckpointError, match=r"num_envs=4, capacity=6.*capacity=7"):
        load_replay(tmp_path / "r.pt", _buffer([2, 2], capacity=7))


def test_cut_episodes_makes_the_newest_step_a_time_limit_cut() -> None:
    """After a cut, no window reads past each env's newest stored step and its transition has weight 0."""
    buffer = _buffer(capacity=8)
    steps = _steps(5, 4, 2, end_prob=0.0)
    steps["terminated"][-1, 0] = True  # env 0 ended its episode at the newest step: it stays terminated
    buffer.extend_batch(steps)
    buffer.cut_episodes()
    newest = 4
    assert buffer.storage["truncated"][newest].tolist() == [False, True, True, True]
    assert buffer.storage["terminated"][newest].tolist() == [True, False, False, False]
    assert not buffer.reward_scale.running.any()
    restarted = _steps(1, 4, 3, end_prob=0.0)  # each env's restarted episode's first step
    buffer.extend_batch(restarted)
    batch = buffer.sample(200)
    # A row whose next obs is a restarted episode's first obs has loss weight 0 (or no bootstrap, for
    # env 0, whose episode really ended): every other window stops at the newest old step.
    reads_restart = (batch.next_obs[:, None, :] == restarted["obs"][0][None]).all(-1).any(-1)
    assert reads_restart.any()
    assert ((batch.valid == 0) | (batch.bootstrap == 0))[reads_restart].all()


def test_a_write_killed_midway_leaves_the_previous_file_complete(tmp_path: Path) -> None:
    """SIGKILL during a replay write leaves the previous complete file, which loads; the partial is unread."""
    path = tmp_path / "checkpoints" / "replay_rank0.pt"
    child = textwrap.dedent(
        f"""
        import sys, torch
        from fastsac_core import ReplayBuffer, save_replay
        buffer = ReplayBuffer(64, 1024, 300, None, 8)  # ~80 MB when full
        k = {{"obs": torch.ones(1024, 64, 300), "actions": torch.ones(1024, 64, 8),
              "rewards": torch.ones(1024, 64), "terminated": torch.zeros(1024, 64, dtype=torch.bool),
              "truncated": torch.zeros(1024, 64, dtype=torch.bool)}}
        buffer.extend_batch(k)
        save_replay({str(path)!r}, buffer.snapshot(), gstep=1)
        print("first written", flush=True)
        while True:
            save_replay({str(path)!r}, buffer.snapshot(), gstep=2)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "first written"
        deadline = time.monotonic() + 30
        partial: list[Path] = []
        while not partial and time.monotonic() < deadline:
            partial = [p for p in path.parent.glob(".*.tmp") if p.stat().st_size > 0]
        assert partial, "no write in progress seen within 30 s"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    # The killed write is either its partial temporary file or a rename already done (gstep 2, complete).
    info = peek_replay(path)
    assert info.gstep in (1, 2) and info.transitions == 64 * 1024
    buffer = ReplayBuffer(64, 1024, 300, None, 8)
    assert load_replay(path, buffer).transitions == 64 * 1024
    assert buffer.storage["obs"].eq(1).all()
    left = discard_partial_checkpoints(path.parent)
    assert all(p.name.startswith(".replay_rank0.pt.") for p in left)
    assert sorted(p.name for p in path.parent.iterdir()) == ["replay_rank0.pt"]


def test_a_torn_file_is_refused_with_what_to_do(tmp_path: Path) -> None:
    """A truncated or foreign replay file raises one CheckpointError naming the file and the fix."""
    path = tmp_path / "replay.pt"
    save_replay(path, _ragged().snapshot(), gstep=1)
    path.write_bytes(path.read_bytes()[:500])
    with pytest.raises(CheckpointError, match=r"cannot be read.*delete it"):
        peek_replay(path)
    torch.save({"format": "other"}, path)
    with pytest.raises(CheckpointError, match="has format 'other'"):
        load_replay(path, _buffer([2, 2]))


def test_the_saver_writes_from_a_thread_skips_while_busy_and_the_final_write_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """maybe_save returns while the write runs; one due meanwhile is skipped; save_now waits, then writes."""
    release = threading.Event()
    calls: list[int] = []
    real = replay_file.save_replay

    def slow_save(path: Path, snapshot: dict[str, Any], *, gstep: int, extra: Any = None) -> Any:
        calls.append(gstep)
        if gstep == 1:
            assert release.wait(10)
        return real(path, snapshot, gstep=gstep, extra=extra)

    monkeypatch.setattr(replay_file, "save_replay", slow_save)
    now = [0.0]
    saver = ReplaySaver(tmp_path / "replay.pt", 10.0, clock=lambda: now[0])
    buffer = _ragged()
    assert not saver.maybe_save(buffer, 1)  # not due yet
    now[0] = 10.0
    assert saver.maybe_save(buffer, 1, lambda: {"at": 1})  # returns at once; the thread waits
    assert saver.writing
    now[0] = 25.0
    assert not saver.maybe_save(buffer, 2)  # due, but the last write is still in flight
    buffer.extend_block(1, {k: v[:, 2:] for k, v in _steps(1, 4, 5).items()})  # training goes on
    release.set()
    final = saver.save_now(buffer, 3)
    assert calls == [1, 3]
    assert final is not None and final.gstep == 3 and final.transitions == 22
    assert peek_replay(tmp_path / "replay.pt").gstep == 3
    assert ReplaySaver(None, 1.0).save_now(buffer, 3) is None  # save_replay=false: nothing


def test_a_failed_write_is_logged_and_keeps_the_previous_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A write that fails (its folder is a file) logs the path and returns None; training is not stopped."""
    (tmp_path / "blocked").write_text("a file where the folder should be")
    saver = ReplaySaver(tmp_path / "blocked" / "replay.pt", None)
    assert saver.save_now(_ragged(), 1) is None
    assert "replay buffer write to" in caplog.text and "previous replay file is kept" in caplog.text


@pytest.mark.gpu
def test_a_cuda_buffer_restores_on_the_cpu_and_back(tmp_path: Path) -> None:
    """A CUDA buffer's file restores into a CPU buffer, whose file restores into a CUDA one: same storage."""
    on_cuda = _buffer([2, 2], device="cuda")
    on_cuda.extend_block(0, {k: v[:, :2].cuda() for k, v in _steps(9, 4, 0).items()})
    on_cuda.extend_block(1, {k: v[:, 2:].cuda() for k, v in _steps(4, 4, 1).items()})
    save_replay(tmp_path / "cuda.pt", on_cuda.snapshot(), gstep=1)
    on_cpu = _buffer([2, 2])
    load_replay(tmp_path / "cuda.pt", on_cpu)
    save_replay(tmp_path / "cpu.pt", on_cpu.snapshot(), gstep=1)
    back = _buffer([2, 2], device="cuda")
    load_replay(tmp_path / "cpu.pt", back)
    assert back.block_written == on_cpu.block_written == (9, 4)
    for name, storage in on_cuda.storage.items():
        written = storage.cpu().nan_to_num(7.0) if storage.is_floating_point() else storage.cpu()
        for other in (on_cpu.storage[name], back.storage[name].cpu()):
            assert torch.equal(other.nan_to_num(7.0) if other.is_floating_point() else other, written), name


def test_a_snapshot_copied_row_by_row_equals_one_copied_whole() -> None:
    """snapshot() copies chunks of rows: one row per chunk gives the tensors of one chunk per block."""
    buffer = _ragged()
    whole, by_row = buffer.snapshot(chunk_bytes=1 << 30), buffer.snapshot(chunk_bytes=1)
    for name, blocks in whole["data"].items():
        assert [tuple(b.shape) for b in blocks] == [
            (6, 2, *buffer.layout.fields[name]),
            (4, 2, *buffer.layout.fields[name]),
        ]
        for a, b in zip(blocks, by_row["data"][name], strict=True):
            assert (
                torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
                if a.is_floating_point()
                else torch.equal(a, b)
            )


@pytest.mark.gpu
def test_a_ragged_cuda_buffers_snapshot_needs_at_most_one_chunk_of_gpu_memory() -> None:
    """A snapshot of a CUDA buffer of 2 column blocks raises the peak by at most one chunk, not a block."""
    from fastsac_core._replay import SNAPSHOT_CHUNK_BYTES

    # obs of one block: 2048 steps x 32 envs x 1024 floats = 256 MiB, 4x a chunk.
    buffer = ReplayBuffer(64, 2048, 1024, None, 2, device="cuda", blocks=[32, 32])
    for block in (0, 1):
        steps = {k: v.expand(2048, 32, *v.shape[2:]).cuda() for k, v in _steps(1, 32, block).items()}
        steps["obs"] = torch.randn(2048, 32, 1024, device="cuda")
        steps.pop("critic_obs")
        buffer.extend_block(block, steps)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    snapshot = buffer.snapshot()
    extra = torch.cuda.max_memory_allocated() - before
    assert extra <= SNAPSHOT_CHUNK_BYTES + (1 << 20), f"{extra / 2**20:.0f} MiB over the buffer"
    for b, start in enumerate((0, 32)):
        assert torch.equal(snapshot["data"]["obs"][b], buffer.storage["obs"][:, start : start + 32].cpu())
