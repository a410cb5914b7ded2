"""Metric loggers: ``logger=`` lists, and W&B in offline mode recording what TensorBoard records."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from fastsac_trainer.config.exceptions import TrainerAppError
from fastsac_trainer.loggers import WandbReporter, quote_logger_list
from fastsac_trainer.reporting import Snapshot
from fastsac_trainer.tensorboard import logged_scalars


def _snapshot(iteration: int) -> Snapshot:
    return Snapshot(
        iteration=iteration,
        env_steps=iteration * 8,
        total_env_steps=80,
        elapsed_s=float(iteration),
        scalars={"rollout/mean_return": 2.0 * iteration, "train/qf_loss": 1.0 / iteration, "x/nan": math.nan},
        timing={"collector0": {"env_step": 3.0}},
    )


def test_a_comma_list_of_loggers_is_one_value() -> None:
    """``logger=tensorboard,wandb`` reaches hydra quoted (not as a sweep); other overrides are untouched."""
    assert quote_logger_list(["logger=tensorboard,wandb", "seed=1,2", "logger=wandb"]) == [
        "logger='tensorboard,wandb'",
        "seed=1,2",
        "logger=wandb",
    ]


def test_an_unknown_logger_is_refused_in_one_line() -> None:
    """``logger=mlflow`` names the setting and the choices."""
    from omegaconf import OmegaConf

    from fastsac_trainer.config.compose import compose_config
    from fastsac_trainer.config.validate import validate_config

    cfg = OmegaConf.to_container(compose_config(["task=pendulum", "logger='tensorboard,mlflow'"]))
    with pytest.raises(
        TrainerAppError, match=r"logger='tensorboard,mlflow' is invalid: use tensorboard, wandb"
    ):
        validate_config(cfg, cuda_count=0)  # type: ignore[arg-type]


def _records(path: Path) -> Iterator[bytes]:
    """The records of a W&B transaction log (LevelDB log format: 32 KiB blocks, 7-byte headers)."""
    data, block, at, pending = path.read_bytes(), 32768, 7, b""  # 7: the ":W&B" file header
    while at + 7 <= len(data):
        left = block - at % block
        _crc, length, kind = struct.unpack("<IHB", data[at : at + 7])
        if left < 7 or (length == 0 and kind == 0):  # the padding at a block's end
            at += left
            continue
        chunk, at = data[at + 7 : at + 7 + length], at + 7 + length
        pending = chunk if kind == 2 else pending + chunk  # 1 full, 2 first, 3 middle, 4 last
        if kind in (1, 4):
            yield pending
            pending = b""


@pytest.mark.slow
def test_wandb_offline_run_holds_every_tensorboard_scalar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offline, the W&B run files hold the config, the group and every logged scalar at its env steps."""
    wandb = pytest.importorskip("wandb", reason="the optional extra `wandb` is not installed")
    from wandb.proto import wandb_internal_pb2

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = {"seed": 3, "task": {"name": "pendulum"}, "wandb": {"project": "p", "entity": None}}
    try:
        reporter = WandbReporter(tmp_path, config, "p", None, "grp")
        for iteration in (1, 2):
            reporter.report(_snapshot(iteration))
        reporter.close()
        # A resume reuses the run's W&B id.
        run_id = (tmp_path / "wandb_id.txt").read_text().strip()
    finally:
        wandb.teardown()
    (log,) = (tmp_path / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")
    history, runs = [], []
    for data in _records(log):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            # A key with "/" is stored as its parts.
            items = {
                item.key or "/".join(item.nested_key): json.loads(item.value_json)
                for item in record.history.item
            }
            history.append({k: v for k, v in items.items() if not k.startswith("_")})
        elif kind == "run":
            runs.append(record.run)
    assert history == [{**logged_scalars(_snapshot(i)), "env_steps": 8 * i} for i in (1, 2)]
    assert runs[0].run_group == "grp" and runs[0].project == "p"
    saved = {item.key: json.loads(item.value_json) for item in runs[0].config.update}
    assert saved["seed"] == 3 and saved["task"] == {"name": "pendulum"}
