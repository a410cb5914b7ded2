"""The repository's leak guard (conftest.py) judges only what the test session itself made."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

INNER = """
import os
from pathlib import Path

def test_leaves_another_runs_segment() -> None:
    Path("/dev/shm/{foreign}").write_bytes(b"x")

def test_leaks_its_own_segment() -> None:
    Path("/dev/shm/" + os.environ["SHMTX_PREFIX"] + "{pid}-feed01").write_bytes(b"x")
"""


@pytest.mark.slow
def test_the_guard_reports_its_own_leaks_and_never_touches_another_processs_segments(tmp_path: Path) -> None:
    """Inner session: its own leaked segment fails its test and is removed; another run's stays."""
    foreign = f"shmtx-{os.getpid()}-f0e1a2"  # what a training run beside the tests has in /dev/shm
    inner_pid = 999_999
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_inner.py").write_text(INNER.format(foreign=foreign, pid=inner_pid))
    env = {k: v for k, v in os.environ.items() if k != "SHMTX_PREFIX"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", str(tmp_path)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        out = done.stdout + done.stderr
        assert done.returncode == 1, out
        assert "2 passed, 1 error" in out, out  # the leak fails the teardown of the leaking test only
        assert "ERROR test_inner.py::test_leaks_its_own_segment" in out and "left /dev/shm entries" in out
        assert Path(f"/dev/shm/{foreign}").exists(), "another process's segment was left alone"
        own = [p for p in Path("/dev/shm").iterdir() if p.name.endswith(f"{inner_pid}-feed01")]
        assert not own, "the inner session removed its own leak"
    finally:
        Path(f"/dev/shm/{foreign}").unlink(missing_ok=True)
