"""cpu_quota: a cgroup's CPU limit, read from synthetic v2 and v1 hierarchies."""

from pathlib import Path

from numa_bind import cpu_quota


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_v2_takes_the_smallest_limit_up_to_the_root(tmp_path: Path) -> None:
    """Under cgroup v2 the job's 'max' defers to its parent's 4-CPU limit; 'max' everywhere is no limit."""
    proc = tmp_path / "cgroup"
    _write(proc, "0::/slice/job\n")
    _write(tmp_path / "fs" / "slice" / "job" / "cpu.max", "max 100000\n")
    _write(tmp_path / "fs" / "slice" / "cpu.max", "400000 100000\n")
    assert cpu_quota(proc_cgroup=proc, root=tmp_path / "fs") == 4.0
    _write(tmp_path / "fs" / "slice" / "cpu.max", "max 100000\n")
    assert cpu_quota(proc_cgroup=proc, root=tmp_path / "fs") is None


def test_v1_reads_the_cfs_quota_and_period(tmp_path: Path) -> None:
    """Under cgroup v1, quota 150000 over period 100000 is 1.5 CPUs; -1 is no limit."""
    proc = tmp_path / "cgroup"
    _write(proc, "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n")
    folder = tmp_path / "fs" / "cpu,cpuacct" / "docker" / "abc"
    _write(folder / "cpu.cfs_quota_us", "150000\n")
    _write(folder / "cpu.cfs_period_us", "100000\n")
    assert cpu_quota(proc_cgroup=proc, root=tmp_path / "fs") == 1.5
    _write(folder / "cpu.cfs_quota_us", "-1\n")
    assert cpu_quota(proc_cgroup=proc, root=tmp_path / "fs") is None


def test_no_cgroup_information_is_no_limit(tmp_path: Path) -> None:
    """Missing files (no cgroups, another OS) read as no limit, and this machine's real one is readable."""
    assert cpu_quota(proc_cgroup=tmp_path / "missing", root=tmp_path) is None
    real = cpu_quota()
    assert real is None or real > 0
