"""Learners across hosts: two "hosts" on one machine over 127.0.0.1, each a real torchrun invocation.

Each host runs one CPU (gloo) learner and two collectors on the tiny pendulum task. Processes are
found through /proc (a torchrun worker runs in its own session, so the conftest guard, which sees
only descendants, could miss what it leaves): every one of a host's processes must be gone at the end,
and every /dev/shm name they made or mapped (``run_end``), however the host ended.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from fastsac_async.run_layout import RunLayout
from fastsac_trainer.testing import TINY_PENDULUM

# torchrun never removes its logs (torchelastic_* in TMPDIR), and a killed host cannot remove its own
# temporary files: every test here gives its hosts a TMPDIR of its own, removed after it.
pytestmark = pytest.mark.usefixtures("child_tmpdir")

APP_MAIN = Path(__file__).resolve().parents[1] / "apps" / "trainer" / "__main__.py"
TINY = [
    *TINY_PENDULUM,
    "algo.trainer.save_interval=100000",
    "algo.trainer.device=cpu",
    "algo.trainer.asynchronous=true",
    "algo.trainer.async_options.num_collectors=2",
    "runs_root=runs",
]
_DONE = re.compile(r"learner0 done at gstep (\d+) after (\d+) updates \(actor (\w+)\)")
_BOUND_S = 30.0
"""The issue's bound: a lost host stops the others within this."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> set[int]:
    """The child processes of ``pid`` (Linux lists them per thread, in /proc)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found.update(int(child) for child in (task / "children").read_text().split())
    return found


class _Host:
    """One host's ``torchrun --nnodes N --node-rank R ... apps/trainer/__main__.py`` (output to files)."""

    def __init__(
        self, cwd: Path, rank: int, nnodes: int, port: int, args: Sequence[str], run_end: Any
    ) -> None:
        self.out_path, self.err_path = cwd / f"host{rank}.out", cwd / f"host{rank}.err"
        command = [
            sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", "--nproc-per-node=1",
            f"--node-rank={rank}", "--master-addr=127.0.0.1", f"--master-port={port}",
            "--monitor-interval=0.5", str(APP_MAIN), *args,
        ]  # fmt: skip
        with self.out_path.open("w") as out, self.err_path.open("w") as err:
            self.proc = subprocess.Popen(command, cwd=cwd, env=dict(os.environ, OMP_NUM_THREADS="1"),
                                         stdout=out, stderr=err)  # fmt: skip
        self._run_end = run_end
        self.seen: set[int] = set()
        self.names: set[str] = set()

    def text(self) -> str:
        """What it printed so far, stdout then stderr."""
        return self.out_path.read_text(errors="replace") + self.err_path.read_text(errors="replace")

    def note_processes(self) -> None:
        """Remember every process of this host now (torchrun, trainer, workers, janitor) and what they map."""
        tree = self._run_end.process_tree(self.proc.pid)
        self.seen |= tree
        self.names |= self._run_end.shm_names(tree)

    def wait_for(self, pattern: str, timeout_s: float) -> None:
        """Wait (bounded) until its output holds ``pattern``."""
        deadline = time.monotonic() + timeout_s
        while pattern not in self.text():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                pytest.fail(f"no {pattern!r} within {timeout_s} s (exit {self.proc.poll()}):\n{self.text()}")
            self.note_processes()
            time.sleep(0.2)
        self.note_processes()

    def finish(self, timeout_s: float) -> int:
        """Wait (bounded) for torchrun's exit, noting its processes meanwhile; its code."""
        deadline = time.monotonic() + timeout_s
        while (code := self.proc.poll()) is None:
            if time.monotonic() > deadline:
                pytest.fail(f"host did not exit within {timeout_s} s:\n{self.text()}")
            self.note_processes()
            time.sleep(0.2)
        return code

    def kill(self) -> None:
        """SIGKILL what an OOM kill reaches: the trainer's process group and torchrun, not the janitor."""
        # A kill on a live host reaches the trainer's process group at most: the OOM killer SIGKILLs the
        # trainer (the process holding the memory) and its workers follow it (PR_SET_PDEATHSIG); a
        # launcher or a shell that kills the job signals the group (torchrun starts the trainer in a
        # session of its own, with its workers and multiprocessing's resource tracker). None reaches
        # the janitor, in a session of its own by design (Note [janitor]), which cleans up after them.
        # torchrun goes too, so that the other host loses this one (a host that is really lost, powered
        # off, takes its /dev/shm with it: nothing to check there).
        self.note_processes()
        for trainer in _children(self.proc.pid):  # the leader of the trainer's group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(trainer, signal.SIGKILL)
        self.proc.kill()

    def close(self) -> None:
        """Kill whatever of it still runs (a failed test), and reap torchrun."""
        if self.proc.poll() is None:
            self.kill()
        self.proc.wait(timeout=30)


def _assert_gone(hosts: Sequence[_Host], run_end: Any, timeout_s: float = 30.0) -> None:
    """Every process of the hosts is gone within ``timeout_s`` (janitors included), then every name of theirs.

    Their names: the /dev/shm segments they made and every name they mapped (the exit codes are each
    test's to check).
    """
    run_end.check(
        processes={p for h in hosts for p in h.seen}, exit_code=None, expected_exit=None,
        bound_s=timeout_s, names={n for h in hosts for n in h.names},
    )  # fmt: skip


def _run_folder(cwd: Path) -> Path:
    folders = [p for p in (cwd / "runs").iterdir() if p.is_dir()]
    assert len(folders) == 1, folders
    return folders[0]


def _done_line(log: Path, last: bool = False) -> tuple[int, int, str]:
    """(gstep, updates, actor digest) of the learner's first (or, after a resume, last) "done" line."""
    found = list(_DONE.finditer(log.read_text()))
    assert found, log.read_text()
    line = found[-1] if last else found[0]
    return int(line.group(1)), int(line.group(2)), line.group(3)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("victim", [1, 0], ids=["host1", "host0-serving-the-store"])
def test_a_sigkilled_host_stops_the_other_which_names_it(tmp_path: Path, run_end: Any, victim: int) -> None:
    """SIGKILL a host as an OOM kill would: the other stops in the bound, names it; nothing of either left."""
    port = _free_port()
    args = [*TINY, "algo.trainer.num_learning_iterations=1000000"]
    hosts = [_Host(tmp_path, r, 2, port, args, run_end) for r in (0, 1)]
    survivor = hosts[1 - victim]
    try:
        for host in hosts:
            host.wait_for("] it ", 300.0)
        time.sleep(1.0)
        hosts[victim].kill()
        killed_at = time.monotonic()
        code = survivor.finish(_BOUND_S + 30.0)
        stopped_s = time.monotonic() - killed_at
    finally:
        for host in hosts:
            host.close()
    assert code != 0
    assert f"error: host {victim} lost" in survivor.text(), survivor.text()
    assert stopped_s < _BOUND_S, stopped_s
    run = _run_folder(tmp_path)
    log = (RunLayout(run) if victim == 1 else RunLayout(run).host(1)).parent_log
    assert f"host {victim} lost" in log.read_text()
    _assert_gone(hosts, run_end)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_ctrl_c_on_one_hosts_torchrun_stops_every_host_with_a_final_checkpoint(
    tmp_path: Path, run_end: Any
) -> None:
    """SIGINT to host 1's torchrun (Ctrl+C on its terminal): both trainers stop, rank 0 checkpoints.

    Host 0, stopped by host 1's stop, says its run was stopped (not completed).
    """
    port = _free_port()
    args = [*TINY, "algo.trainer.num_learning_iterations=1000000"]
    hosts = [_Host(tmp_path, r, 2, port, args, run_end) for r in (0, 1)]
    try:
        for host in hosts:
            host.wait_for("] it ", 300.0)
        time.sleep(1.0)
        hosts[1].proc.send_signal(signal.SIGINT)
        for host in hosts:
            host.wait_for("done: iterations=", _BOUND_S + 30.0)
        # torchrun on host 0 then waits in its exit barrier for the interrupted torchrun (its own
        # behaviour, wiki/multi-node.md); the trainers are done.
    finally:
        for host in hosts:
            host.close()
    assert "stop_reason=SIGINT" in hosts[1].text()
    assert "stop_reason=stop_requested" in hosts[0].text(), "host 0 ended short of its budget: not completed"
    run = _run_folder(tmp_path)
    final = re.search(r"done: iterations=(\d+)", hosts[0].text())
    assert final, hosts[0].text()
    assert RunLayout(run).checkpoint(int(final.group(1))).is_file()
    _assert_gone(hosts, run_end)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_one_host_under_torchrun_is_a_plain_run(tmp_path: Path, run_end: Any) -> None:
    """Torchrun --nnodes 1: the trainer runs as without torchrun (no store, no host folders)."""
    args = [*TINY, "algo.trainer.num_learning_iterations=12"]
    host = _Host(tmp_path, 0, 1, _free_port(), args, run_end)
    try:
        assert host.finish(300.0) == 0, host.text()
    finally:
        host.close()
    run = _run_folder(tmp_path)
    assert "run across" not in host.text()
    assert sorted(p.name for p in RunLayout(run).checkpoints.iterdir()) == [
        "model_0000012.pt",
        "replay_rank0.pt",
    ]
    assert not list(run.glob("host*"))
    _assert_gone([host], run_end)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_hosts_that_disagree_stop_before_anything_starts(tmp_path: Path, run_end: Any) -> None:
    """Hosts with different env counts: every host stops with one line naming the setting and both values."""
    port = _free_port()
    hosts = [_Host(tmp_path, r, 2, port, [*TINY, f"task.num_envs={2 * (r + 1)}"], run_end) for r in (0, 1)]
    try:
        codes = [host.finish(300.0) for host in hosts]
    finally:
        for host in hosts:
            host.close()
    line = "error: hosts disagree on task.num_envs: host 0 (%s) has 2, host 1 (%s) has 4" % (
        (socket.gethostname(),) * 2
    )
    for code, host in zip(codes, hosts, strict=True):
        assert code != 0 and line in host.text(), host.text()
        assert "spawned" not in host.text()
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_hosts_train_as_one_run_then_resume_it_as_one_run(tmp_path: Path, run_end: Any) -> None:
    """Two torchrun hosts train as one run (one folder, identical learners), then resume it to the budget."""
    first = [*TINY, "algo.trainer.num_learning_iterations=16", "run_name=r"]
    port = _free_port()
    hosts = [_Host(tmp_path, r, 2, port, first, run_end) for r in (0, 1)]
    try:
        codes = [host.finish(300.0) for host in hosts]
        assert codes == [0, 0], [h.text() for h in hosts]
    finally:
        for host in hosts:
            host.close()
    run = _run_folder(tmp_path)
    primary = _done_line(RunLayout(run).log("learner0"))
    other = _done_line(RunLayout(run).host(1).log("learner0"))
    assert primary == other and primary[0] == 16 and primary[1] > 0, (primary, other)
    assert "run across 2 hosts" in hosts[1].text() and "learner rank 1 on cpu" in hosts[0].text()
    # The env steps are the whole run's (every host's envs), not host 0's alone.
    envs = int(re.search(r"in all: \d+ learners, (\d+) envs", hosts[0].text()).group(1))  # type: ignore[union-attr]
    steps = int(re.search(r"done: iterations=16, env_steps=(\d+)", hosts[0].text()).group(1))  # type: ignore[union-attr]
    assert 16 * envs <= steps < 20 * envs, (steps, envs)
    layout, host1 = RunLayout(run), RunLayout(run).host(1)
    assert sorted(layout.checkpoints.iterdir()) == [layout.checkpoint(16), layout.replay(0)]
    # Host 1 keeps its learner's replay shard (run-wide rank 1), no checkpoint and no events.
    assert list(host1.checkpoints.iterdir()) == [host1.replay(1)] and not list(host1.events.glob("events.*"))
    assert list(run.glob("events.*"))
    _assert_gone(hosts, run_end)

    port = _free_port()
    again = [f"resume={run}", "algo.trainer.num_learning_iterations=28"]
    hosts = [_Host(tmp_path, r, 2, port, again, run_end) for r in (0, 1)]
    try:
        codes = [host.finish(300.0) for host in hosts]
        assert codes == [0, 0], [h.text() for h in hosts]
    finally:
        for host in hosts:
            host.close()
    checkpoint = RunLayout(run).checkpoint(16)
    for host in hosts:
        assert f"resuming from {checkpoint} (iteration 16); replay buffer of " in host.text(), host.text()
    for shard, log in ((layout.replay(0), layout.log("learner0")), (host1.replay(1), host1.log("learner0"))):
        assert f"learner0: replay buffer restored from {shard}: " in log.read_text(), "each host's own shard"
    primary = _done_line(RunLayout(run).log("learner0"), last=True)
    other = _done_line(RunLayout(run).host(1).log("learner0"), last=True)
    assert primary == other and primary[0] == 28, (primary, other)
    assert sorted(layout.checkpoints.iterdir()) == [
        layout.checkpoint(16),
        layout.checkpoint(28),
        layout.replay(0),
    ]
    _assert_gone(hosts, run_end)
