import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from _runner import SPAWN

import shm_transport._segment as seg
from shm_transport import HostRing, RingLayout, cleanup_stale_segments, list_segments
from shm_transport._cli import main

PREFIX = f"shmtxtest{os.getpid()}-"
TINY = RingLayout.of(2, {"x": ((1,), torch.float32)})


def _dead_pid() -> int:
    proc = SPAWN.Process(target=os.getpid)
    proc.start()
    proc.join(timeout=60.0)
    assert proc.exitcode == 0 and proc.pid is not None
    return proc.pid


@pytest.fixture
def segments() -> Iterator[tuple[Path, Path]]:
    """One segment file of a dead creator and one of this (live) process, under a test prefix."""
    dead = seg.SHM_DIR / f"{PREFIX}{_dead_pid()}-abc123"
    live = seg.SHM_DIR / f"{PREFIX}{os.getpid()}-def456"
    for path in (dead, live):
        path.write_bytes(b"\0" * 128)
    yield dead, live
    for path in (dead, live):
        path.unlink(missing_ok=True)


def test_cleanup_removes_dead_creators_only(segments: tuple[Path, Path]) -> None:
    """cleanup_stale_segments removes the dead creator's segment and leaves the live one."""
    dead, live = segments
    assert cleanup_stale_segments(prefix=PREFIX, dry_run=True) == [dead.name]
    assert dead.exists()
    assert cleanup_stale_segments(prefix=PREFIX) == [dead.name]
    assert not dead.exists() and live.exists()
    assert cleanup_stale_segments(prefix=PREFIX) == []


def test_list_reports_liveness(segments: tuple[Path, Path]) -> None:
    """list_segments parses the creator pid from the name and reports whether it is alive."""
    dead, live = segments
    found = {info.name: info for info in list_segments(prefix=PREFIX)}
    assert found[dead.name].creator_alive is False
    assert found[live.name].creator_alive is True and found[live.name].creator_pid == os.getpid()
    assert found[live.name].nbytes == 128


def test_cleanup_never_touches_a_live_ring() -> None:
    """A ring of this live process survives the default-prefix sweep."""
    with HostRing.create(TINY, capacity=2) as ring:
        assert ring.name not in cleanup_stale_segments()
        assert (seg.SHM_DIR / ring.name).exists()


def test_cli_list_and_cleanup(segments: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI lists segments and removes the stale one (--dry-run first)."""
    dead, live = segments
    assert main(["--prefix", PREFIX, "list"]) == 0
    listed = capsys.readouterr().out
    assert dead.name in listed and "dead (stale)" in listed and live.name in listed
    assert main(["--prefix", PREFIX, "cleanup", "--dry-run"]) == 0
    assert f"would remove {dead.name}" in capsys.readouterr().out and dead.exists()
    assert main(["--prefix", PREFIX, "cleanup"]) == 0
    assert f"removed {dead.name}" in capsys.readouterr().out and not dead.exists()


def test_shmtx_prefix_names_segments_and_scopes_the_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    """$SHMTX_PREFIX names new segments, and the default sweep removes only its own dead ones."""
    other = seg.SHM_DIR / f"shmtx-{_dead_pid()}-07e0f5"  # a dead creator under the default prefix
    other.write_bytes(b"\0" * 64)
    try:
        monkeypatch.setenv("SHMTX_PREFIX", PREFIX)
        mine = seg.SHM_DIR / f"{PREFIX}{_dead_pid()}-abcdef"
        mine.write_bytes(b"\0" * 64)
        with HostRing.create(TINY, capacity=2) as ring:
            assert ring.name.startswith(f"{PREFIX}{os.getpid()}-")
            assert cleanup_stale_segments() == [mine.name]
        assert other.exists() and not mine.exists()
    finally:
        other.unlink(missing_ok=True)


def test_the_default_prefix_and_a_bad_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset or empty, the prefix is shmtx-; other characters or a trailing digit are refused with the fix."""
    monkeypatch.delenv("SHMTX_PREFIX", raising=False)
    assert seg.default_prefix() == "shmtx-"
    monkeypatch.setenv("SHMTX_PREFIX", "")
    assert seg.default_prefix() == "shmtx-"
    for bad in ("a/b", "shmtx-job4"):  # a trailing digit would run into the creator pid
        monkeypatch.setenv("SHMTX_PREFIX", bad)
        with pytest.raises(seg.SegmentError, match=rf"SHMTX_PREFIX='{bad}' is not a usable .* or unset it"):
            seg.default_prefix()


@pytest.mark.parametrize("prefix", ["", "bad/", "job7"])
def test_the_cli_refuses_a_bad_prefix_in_one_line(prefix: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty (every <pid>-<hex> file), slashed or digit-ending --prefix exits 2 in one line naming it."""
    with pytest.raises(SystemExit) as stopped:
        main(["--prefix", prefix, "cleanup", "--dry-run"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"--prefix={prefix!r} is not a usable segment name prefix" in err and "Traceback" not in err
