"""Checkpoints: bit-identical resume, atomic write, clear errors."""

from __future__ import annotations

import errno
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from fastsac_core import CheckpointError, FastSACAgent, load_checkpoint, peek_checkpoint, save_checkpoint
from fastsac_core.testing import TINY_DIMS, make_agent, tiny_config


def _agent(**overrides: object) -> FastSACAgent:
    return make_agent(TINY_DIMS, tiny_config(**overrides), "cpu", num_envs=4)


def _feed(agent: FastSACAgent, steps: int) -> None:
    n = agent.buffer.num_envs
    for _ in range(steps):  # the global RNG drives the data, so the RNG state matters for a resume
        agent.buffer.extend(
            {
                "obs": torch.randn(n, 6),
                "critic_obs": torch.randn(n, 8),
                "actions": torch.rand(n, 3),
                "rewards": torch.randn(n),
                "terminated": torch.rand(n) < 0.1,
                "truncated": torch.rand(n) < 0.1,
            }
        )


def _train(agent: FastSACAgent, calls: int) -> list[dict[str, torch.Tensor]]:
    out = []
    for _ in range(calls):
        _feed(agent, 2)
        out.append(agent.update(3))  # 3 updates with policy_frequency 2: the actor gate crosses calls
    return out


def _params(agent: FastSACAgent) -> list[torch.Tensor]:
    modules = (agent.model.actor, agent.model.qf, agent.model.qf_target)
    return [p.detach() for m in modules for p in m.parameters()] + [agent.model.log_alpha.detach()]


def test_resume_is_bit_identical(tmp_path: Path) -> None:
    """Train k, save, train m == load into a fresh agent, train m: params, stats, metrics bit for bit."""
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    agent = _agent()
    _feed(agent, 10)
    _train(agent, 3)
    path = save_checkpoint(tmp_path / "ckpt.pt", agent, extra={"env_steps": 123}, include_buffer=True)
    continued = _train(agent, 4)
    after_numpy, after_python = np.random.rand(), random.random()

    torch.manual_seed(99)  # scramble every RNG: the checkpoint must restore them
    random.seed(99)
    np.random.seed(99)
    resumed = _agent()
    assert load_checkpoint(path, resumed) == {"env_steps": 123}
    replayed = _train(resumed, 4)
    assert (np.random.rand(), random.random()) == (after_numpy, after_python)
    for a, b in zip(_params(agent), _params(resumed), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(continued, replayed, strict=True):
        for key in a:
            assert torch.equal(a[key], b[key]), key
    assert torch.equal(agent.obs_normalizer.m2, resumed.obs_normalizer.m2)
    assert agent.update_idx == resumed.update_idx == 21


def test_an_agent_loaded_from_a_live_state_owns_its_optimizer_state() -> None:
    """Loaded from another agent's live state_dict: the source's training leaves the loaded moments alone."""
    torch.manual_seed(0)
    source = _agent()
    _feed(source, 10)
    _train(source, 2)
    loaded = _agent()
    loaded.load_state_dict(source.state_dict())
    before = [[t.clone() for t in s.values()] for o in loaded.model.optimizers for s in o.state.values()]
    _train(source, 1)  # torch's Optimizer.load_state_dict would have kept these very tensors
    after = [list(s.values()) for o in loaded.model.optimizers for s in o.state.values()]
    assert len(before) == len(after) > 0
    for a, b in zip(before, after, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_peek_and_atomic_write(tmp_path: Path) -> None:
    """peek_checkpoint reads counters and extra without an agent; no temporary file is left behind."""
    agent = _agent()
    _feed(agent, 5)
    agent.update(2)
    save_checkpoint(tmp_path / "a.pt", agent, extra={"step": 7})
    save_checkpoint(tmp_path / "a.pt", agent, extra={"step": 8})  # overwrite in place
    info = peek_checkpoint(tmp_path / "a.pt")
    assert info["counters"]["update_idx"] == 2 and info["extra"] == {"step": 8}
    assert info["config"]["critic_hidden_dim"] == 32 and info["dims"]["act_dim"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt"]


def test_missing_corrupt_and_incompatible_checkpoints(tmp_path: Path) -> None:
    """Each failure raises CheckpointError naming the path, or the tensor and both shapes."""
    agent = _agent()
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt", agent)
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_checkpoint(tmp_path / "bad.pt", agent)
    save_checkpoint(tmp_path / "good.pt", agent)
    truncated = (tmp_path / "good.pt").read_bytes()[:200]
    (tmp_path / "torn.pt").write_bytes(truncated)
    with pytest.raises(CheckpointError, match="cannot be read"):
        peek_checkpoint(tmp_path / "torn.pt")
    wider = _agent(critic_hidden_dim=64)
    with pytest.raises(
        CheckpointError, match=r"qf\.linears\.0\.weight has shape \(2, 11, 32\) .* \(2, 11, 64\)"
    ):
        load_checkpoint(tmp_path / "good.pt", wider)
    more_envs = make_agent(TINY_DIMS, tiny_config(), "cpu", num_envs=8)
    with pytest.raises(CheckpointError, match="num_envs=4"):
        load_checkpoint(tmp_path / "good.pt", more_envs)


def test_a_checkpoint_of_another_value_support_is_refused_an_older_one_read_with_its_defaults(
    tmp_path: Path,
) -> None:
    """The critics' atoms come with the checkpoint: another support is refused, also from an older file."""
    saved = save_checkpoint(tmp_path / "a.pt", _agent())
    load_checkpoint(saved, _agent())
    for other in ({"v_max": 6.0}, {"reward_normalization": True}):
        with pytest.raises(
            CheckpointError, match=r"was trained on the value support \{'reward_normalization': False"
        ):
            load_checkpoint(saved, _agent(**other))
    payload = torch.load(saved, weights_only=True)
    for key in ("reward_normalization", "normalized_v_max"):  # a checkpoint of a trainer before them
        del payload["config"][key]
    torch.save(payload, tmp_path / "older.pt")
    load_checkpoint(tmp_path / "older.pt", _agent())  # reward normalisation was off then
    with pytest.raises(CheckpointError, match=re.escape("this agent's is {'reward_normalization': True")):
        load_checkpoint(tmp_path / "older.pt", _agent(reward_normalization=True))


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full, whose every write is ENOSPC")
@pytest.mark.parametrize("torch_opens_it", [False, True], ids=["OSError", "torch-unexpected-pos"])
def test_a_write_out_of_space_is_one_line_naming_the_file_the_space_and_the_fix(
    tmp_path: Path, torch_opens_it: bool
) -> None:
    """ENOSPC, as Python's OSError or torch's bare 'unexpected pos', is one CheckpointError line; no other."""
    from fastsac_core._checkpoint import _space_checked

    path = tmp_path / "model_0000006.pt"
    payload = {"weights": torch.zeros(100_000)}
    with pytest.raises(CheckpointError) as info, _space_checked(path):
        if torch_opens_it:
            torch.save(payload, "/dev/full")  # RuntimeError: [enforce fail at ...] unexpected pos
        else:
            with open("/dev/full", "wb") as full:
                torch.save(payload, full)
    line = str(info.value)
    assert "\n" not in line
    assert line.startswith(f"'{path}' could not be written: its filesystem is out of space ("), line
    assert re.search(r"out of space \([\d,.]+ [MG]B free of [\d,.]+ [MG]B\);", line), line
    assert line.endswith(
        "; the files already there are intact; free space there, or put the run folder on another "
        "filesystem (the trainer's runs_root=DIR)"
    ), line
    with pytest.raises(PermissionError), _space_checked(path):
        raise PermissionError(13, "Permission denied", str(path))  # not a full disk: left as it is


def _torch_short_write(underneath: OSError | None) -> RuntimeError:
    """Torch's error of a write that came up short, raised while ``underneath`` (the file's) was handled."""
    try:
        try:
            if underneath is not None:
                raise underneath
        finally:
            raise RuntimeError("[enforce fail at inline_container.cc:671] . unexpected pos 704 vs 598")
    except RuntimeError as error:
        return error


@pytest.mark.parametrize(
    ("underneath", "out_of_space"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
        (OSError(errno.EIO, "Input/output error"), False),
        (OSError(errno.EFBIG, "File too large"), False),
        (None, True),
    ],
    ids=["ENOSPC", "EDQUOT", "EIO", "EFBIG", "no-errno"],
)
def test_torch_s_short_write_is_out_of_space_by_the_errno_under_it(
    tmp_path: Path, underneath: OSError | None, out_of_space: bool
) -> None:
    """The errno under torch's 'unexpected pos' decides (EIO is no full disk); its text only without one."""
    from fastsac_core._checkpoint import _space_checked

    error = _torch_short_write(underneath)
    expected = CheckpointError if out_of_space else RuntimeError
    with pytest.raises(expected) as info, _space_checked(tmp_path / "m.pt"):
        raise error
    assert (info.value is error) != out_of_space


_FULL_DISK = """
import os, sys
from pathlib import Path
import torch
from fastsac_core import CheckpointError, peek_checkpoint, save_checkpoint, save_replay
from fastsac_core.testing import TINY_DIMS, make_agent, tiny_config

folder = Path(sys.argv[1])
agent = make_agent(TINY_DIMS, tiny_config(), "cpu", num_envs=4)
good = save_checkpoint(folder / "model.pt", agent, extra={"iteration": 4})
kept = good.read_bytes()
for write in (
    lambda: save_checkpoint(good, agent, extra={"iteration": 6, "pad": torch.zeros(1_000_000)}),
    lambda: save_replay(folder / "replay_rank0.pt", {"pad": torch.zeros(1_000_000)}, gstep=6),
):
    try:
        write()
    except CheckpointError as error:
        print(error)
assert good.read_bytes() == kept and peek_checkpoint(good)["extra"] == {"iteration": 4}
print(sorted(os.listdir(folder)))
"""


def test_a_checkpoint_written_onto_a_full_filesystem_keeps_the_previous_one(tmp_path: Path) -> None:
    """On a real 1 MB filesystem a 4 MB checkpoint fails in one line; the previous one alone stays."""
    import shutil
    import subprocess
    import sys

    mount = ["unshare", "--user", "--map-root-user", "--mount"]  # a private mount namespace of its own
    if shutil.which("unshare") is None or subprocess.run([*mount, "true"], check=False).returncode:
        pytest.skip("no user and mount namespaces here for a small tmpfs of the test's own")
    script = 'mount -t tmpfs -o size=1m tmpfs "$1" && exec "$2" -c "$3" "$1"'
    result = subprocess.run(
        [*mount, "sh", "-c", script, "sh", str(tmp_path), sys.executable, _FULL_DISK],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    checkpoint_line, replay_line, listing = result.stdout.splitlines()
    assert checkpoint_line.startswith(f"'{tmp_path}/model.pt' could not be written: its filesystem is out of")
    assert " MB free of 1.0 MB); the previous one is intact; free space there" in checkpoint_line
    assert replay_line.startswith(f"'{tmp_path}/replay_rank0.pt' could not be written: its filesystem is")
    assert "); the files already there are intact; free space there" in replay_line
    assert listing == "['model.pt']", "no temporary file left behind"
