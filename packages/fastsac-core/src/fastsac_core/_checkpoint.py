"""Checkpoints of the whole training state, written atomically.

A checkpoint is one ``torch.save`` file holding: format tag, dims and config (as plain dicts), the
agent's state (networks, targets, optimizers, log_alpha, GradScaler, normalizers, counters, optionally
the replay data), the RNG states of torch (CPU and every CUDA device), numpy and python, and the
caller's ``extra`` dict. It is written to a temporary file in the same folder, fsynced, then renamed
over the destination, so a crash leaves either the old file or the new one, never a torn one. A write
that runs out of space is one :class:`CheckpointError` line naming the file, the space left on its
filesystem and the fix, the old file untouched (``_space_checked``): every checkpoint, policy
checkpoint and replay file is written here.

A *policy checkpoint* (:func:`save_policy_checkpoint`, ``kind: "policy"``) holds only what acting
needs: the actor and the observation normalizer of an :class:`InferencePolicy` (the best checkpoint
of an evaluation during training). ``trainer eval`` and ``trainer export`` read both kinds; only a
training checkpoint can be resumed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ._agent import FastSACAgent
from ._inference import InferencePolicy
from .config import FastSACConfig
from .env import EnvDims
from .exceptions import CheckpointError, ConfigError

__all__ = [
    "discard_partial_checkpoints",
    "load_checkpoint",
    "peek_checkpoint",
    "save_checkpoint",
    "save_policy_checkpoint",
]

FORMAT = "fastsac-core/checkpoint/1"


def _rng_state() -> dict[str, Any]:
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    assert isinstance(keys, np.ndarray)
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []  # type: ignore[no-untyped-call]
    return {
        "torch": torch.get_rng_state(),
        "cuda": cuda_states,
        # numpy's state as tensors and plain numbers so the file loads with weights_only=True.
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": pos,
            "has_gauss": has_gauss,
            "cached": cached,
        },
        "python": random.getstate(),
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    # The payload may have been loaded onto the agent's CUDA device (``map_location``), but RNG states
    # are CPU byte tensors whatever the device they seed.
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"] and torch.cuda.is_available():
        # A checkpoint of a host with more GPUs than this one seeds the devices this host has.
        for index, cuda_state in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state.cpu(), index)
    npy = state["numpy"]
    keys = npy["keys"].cpu().numpy().astype(np.uint32)
    np.random.set_state((npy["kind"], keys, npy["pos"], npy["has_gauss"], npy["cached"]))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def save_checkpoint(
    path: str | os.PathLike[str],
    agent: FastSACAgent,
    *,
    extra: dict[str, Any] | None = None,
    include_buffer: bool = False,
) -> Path:
    """Write the whole training state of ``agent`` to ``path`` atomically.

    Args:
        path: Destination file (its folder is created).
        agent: The agent to save.
        extra: Caller's data (env steps, wall time, ...): plain Python values and tensors.
        include_buffer: Also store the replay data (large; needed for a bit-identical resume).

    Returns:
        The path written.
    """
    payload = {
        "format": FORMAT,
        "kind": "training",
        "dims": dataclasses.asdict(agent.dims),
        "config": dataclasses.asdict(agent.cfg),
        "counters": {"update_idx": agent.update_idx, "buffer_written": agent.buffer.written},
        "agent": agent.state_dict(include_buffer=include_buffer),
        "rng": _rng_state(),
        "extra": extra or {},
    }
    return _write_atomically(Path(path), payload)


def save_policy_checkpoint(
    path: str | os.PathLike[str],
    policy: InferencePolicy,
    dims: EnvDims,
    cfg: FastSACConfig,
    *,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write ``policy``'s actor and observation normalizer to ``path`` atomically (a policy checkpoint).

    Args:
        path: Destination file (its folder is created).
        policy: The policy whose weights to keep.
        dims: Its task dimensions.
        cfg: The hyper-parameters it was built with.
        extra: Caller's data (the global step, the evaluated return, ...).

    Returns:
        The path written.
    """
    payload = {
        "format": FORMAT,
        "kind": "policy",
        "dims": dataclasses.asdict(dims),
        "config": dataclasses.asdict(cfg),
        "counters": {},
        "agent": {"actor": policy.actor.state_dict(), "obs_normalizer": policy.normalizer.state_dict()},
        "extra": extra or {},
    }
    return _write_atomically(Path(path), payload)


def _write_atomically(path: Path, payload: dict[str, Any]) -> Path:
    """``torch.save`` into a temporary file beside ``path``, fsync, rename over it, fsync the folder.

    Raises:
        CheckpointError: The filesystem ran out of space (:func:`_out_of_space`); ``path`` is as it was.
    """
    with _space_checked(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(payload, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp_name, path)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)  # before the free space is measured
            raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)
    return path


def _read(path: str | os.PathLike[str], map_location: Any, mmap: bool = False) -> dict[str, Any]:
    return read_payload(
        Path(path), "checkpoint", FORMAT, map_location=map_location, mmap=mmap,
        missing="; check the path",
        unreadable="; it is corrupt or not a fastsac-core checkpoint: use another (an earlier one)",
    )  # fmt: skip


def read_payload(
    path: Path, kind: str, fmt: str, *, map_location: Any, mmap: bool, missing: str, unreadable: str
) -> dict[str, Any]:
    """The dict a fastsac-core file of format ``fmt`` holds (a checkpoint, a replay file).

    Raises:
        CheckpointError: The file is missing (``<kind> <path> does not exist<missing>``), cannot be
            read (``... cannot be read (<error>)<unreadable>``) or has another format.
    """
    if not path.is_file():
        raise CheckpointError(f"{kind} {str(path)!r} does not exist{missing}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as exc:  # torch raises many types for a torn or foreign file
        raise CheckpointError(
            f"{kind} {str(path)!r} cannot be read ({type(exc).__name__}: {exc}){unreadable}"
        ) from exc
    if not isinstance(payload, dict) or payload.get("format") != fmt:
        seen = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(f"{kind} {str(path)!r} has format {seen!r}; expected {fmt!r}")
    return payload


def peek_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Kind, counters, dims, config, extra and replay size of a checkpoint, without building an agent.

    ``kind`` is ``training`` or ``policy`` (:func:`save_policy_checkpoint`); ``buffer`` holds the
    replay's ``num_envs`` and ``capacity`` (both 0 for a policy checkpoint, which has no replay).
    """
    payload = _read(path, "cpu", mmap=True)
    info = {key: payload[key] for key in ("counters", "dims", "config", "extra")}
    info["kind"] = payload.get("kind", "training")
    buffer = payload["agent"].get("buffer", {"num_envs": 0, "capacity": 0})
    info["buffer"] = {"num_envs": int(buffer["num_envs"]), "capacity": int(buffer["capacity"])}
    return info


def _check_shapes(where: str, saved: dict[str, Any], current: dict[str, Any]) -> None:
    missing = sorted(set(current) - set(saved))
    unexpected = sorted(set(saved) - set(current))
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint {where} does not match this agent: missing {missing}, unexpected {unexpected};"
            " build the agent with the config the checkpoint was saved with"
        )
    for key, value in current.items():
        if isinstance(value, torch.Tensor) and tuple(saved[key].shape) != tuple(value.shape):
            raise CheckpointError(
                f"tensor {where}.{key} has shape {tuple(saved[key].shape)} in the checkpoint but"
                f" {tuple(value.shape)} in this agent; build the agent with the checkpoint's dims and config"
            )


def _check_support(path: str | os.PathLike[str], saved: dict[str, Any], cfg: FastSACConfig) -> None:
    """Refuse a checkpoint whose critics were trained on another value support than ``cfg``'s.

    The critics keep their atoms in a buffer the checkpoint restores: loaded into an agent of another
    support they would go on with the checkpoint's while the agent's config says otherwise.
    """
    try:
        then = FastSACConfig.support_settings_of(saved)
    except ConfigError as exc:
        raise CheckpointError(f"checkpoint {str(path)!r} holds an invalid value support: {exc}") from exc
    now = cfg.support_settings
    if then != now:
        raise CheckpointError(
            f"checkpoint {str(path)!r} was trained on the value support {then}, this agent's is {now}; "
            "build the agent with the checkpoint's"
        )


def load_checkpoint(
    path: str | os.PathLike[str],
    agent: FastSACAgent,
    *,
    map_location: Any = None,
    restore_rng: bool = True,
) -> dict[str, Any]:
    """Restore ``agent`` (and the RNG states) from ``path``; return the checkpoint's ``extra``.

    Raises:
        CheckpointError: The file is missing or corrupt, its tensors do not fit ``agent`` (the
            message names the tensor and both shapes), or its critics' value support is not
            ``agent``'s (``FastSACConfig.support_settings``).
    """
    payload = _read(path, map_location if map_location is not None else agent.device)
    if payload.get("kind", "training") != "training":
        raise CheckpointError(
            f"checkpoint {str(path)!r} is a policy checkpoint (actor and normalizer only, e.g. best.pt): "
            "it evaluates and exports but cannot be resumed; resume from a model_*.pt checkpoint"
        )
    saved, current = payload["agent"], agent.state_dict(include_buffer=False)
    for key in ("actor", "qf", "qf_target", "obs_normalizer", "critic_obs_normalizer"):
        _check_shapes(key, saved[key], current[key])
    _check_support(path, payload["config"], agent.cfg)
    buffer_saved, buffer_now = saved["buffer"], current["buffer"]
    if (buffer_saved["num_envs"], buffer_saved["capacity"]) != (
        buffer_now["num_envs"],
        buffer_now["capacity"],
    ):
        raise CheckpointError(
            f"replay buffer in checkpoint has num_envs={buffer_saved['num_envs']},"
            f" capacity={buffer_saved['capacity']}; this agent has num_envs={buffer_now['num_envs']},"
            f" capacity={buffer_now['capacity']}; use the same num_envs and buffer_size"
        )
    try:
        agent.load_state_dict(saved)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"checkpoint {str(path)!r} does not fit this agent: {exc}") from exc
    if restore_rng:
        _set_rng_state(payload["rng"])
    extra: dict[str, Any] = payload["extra"]
    return extra


_NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_TORCH_WRITE_FAILED = ("unexpected pos", "file write failed")
"""What torch's zip writer says when a write into its file came up short, whatever the reason."""


def _out_of_space(error: BaseException) -> bool:
    """Whether ``error`` of a write is the filesystem (or the user's quota) running out of space.

    The first ``OSError`` with an errno along ``error``'s causes and contexts decides: torch's writer
    raises its ``RuntimeError`` while the file's own ``OSError`` is handled, so that error is there when
    torch wrote into a Python file. Only with no errno anywhere (torch opened the file itself and
    dropped it) does torch's "came up short" text count, as a short write is then most likely a full disk.
    """
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, OSError) and link.errno is not None:
            return link.errno in _NO_SPACE_ERRNOS
        link = link.__cause__ or link.__context__
    return isinstance(error, RuntimeError) and any(text in str(error) for text in _TORCH_WRITE_FAILED)


@contextlib.contextmanager
def _space_checked(path: Path) -> Iterator[None]:
    """A write of ``path`` inside that runs out of space becomes one line: the file, the space left, the fix.

    Raises:
        CheckpointError: From the ``OSError`` (``ENOSPC``, ``EDQUOT``) or torch's ``RuntimeError``.
    """
    try:
        yield
    except (OSError, RuntimeError) as error:
        if not _out_of_space(error):
            raise
        try:
            usage = shutil.disk_usage(path.parent)
            space = f"{_size(usage.free)} free of {_size(usage.total)}"
        except OSError:
            space = "free space unknown"
        kept = "the previous one is intact" if path.exists() else "the files already there are intact"
        raise CheckpointError(
            f"{str(path)!r} could not be written: its filesystem is out of space ({space}); {kept}; "
            "free space there, or put the run folder on another filesystem (the trainer's runs_root=DIR)"
        ) from error


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e9:,.1f} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:,.1f} MB"


def discard_partial_checkpoints(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove what a writer killed in the middle of :func:`save_checkpoint` left in ``folder``.

    Such a writer leaves its hidden temporary file (``.model_0000100.pt.<random>.tmp``, never a
    torn checkpoint: the rename is atomic). Call this only when no process writes into ``folder``.

    Returns:
        The files removed.
    """
    folder = Path(folder)
    found = sorted(folder.glob(".*.tmp")) if folder.is_dir() else []
    for tmp in found:
        tmp.unlink(missing_ok=True)
    return found
