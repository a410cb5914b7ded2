"""``trainer export checkpoint=... format=onnx``: the deterministic policy for deployment.

The ONNX graph maps raw observations to actions in the env's bounds: the observation normalizer
is folded in (``(obs - mean) / (std + eps)`` with the checkpoint's statistics as constants), then
the actor's squashed mean. A JSON sidecar (``<file>.json``) records the dims, action bounds,
input/output names, the task and the checkpoint's counters.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from fastsac_async import RunLayout
from fastsac_core import InferencePolicy
from fastsac_trainer.commands import EXPORT, parse
from fastsac_trainer.config.exceptions import TrainerAppError
from fastsac_trainer.evaluate import load_policy
from fastsac_trainer.run_dir import resolve_resume

__all__ = ["DeployedPolicy", "export_main", "export_onnx"]

INPUT_NAME = "obs"
"""Name of the ONNX input: raw observations, float32 ``(batch, obs_dim)``."""
OUTPUT_NAME = "actions"
"""Name of the ONNX output: actions within the bounds, float32 ``(batch, act_dim)``."""
_TASK_KEYS = ("name", "env_id", "env_factory", "env_kwargs", "env_import", "max_episode_steps")
"""The settings of the run's ``task`` node the sidecar records: which task and env the policy acts in."""


class DeployedPolicy(nn.Module):
    """Raw observation -> deterministic action: normalizer folded in front of the actor.

    Args:
        policy: The loaded inference policy (actor + normalizer).
    """

    obs_mean: Tensor
    obs_scale: Tensor

    def __init__(self, policy: InferencePolicy) -> None:
        super().__init__()
        self.actor = policy.actor
        normalizer = policy.normalizer
        if normalizer.enabled:
            mean, scale = normalizer.mean.clone(), normalizer.std.clone() + normalizer.eps
        else:
            mean, scale = torch.zeros_like(normalizer.mean), torch.ones_like(normalizer.std)
        self.register_buffer("obs_mean", mean)
        self.register_buffer("obs_scale", scale)

    def forward(self, obs: Tensor) -> Tensor:
        """Actions ``(B, act_dim)`` for raw observations ``(B, obs_dim)``."""
        normalized = (obs - self.obs_mean) / self.obs_scale
        actions: Tensor = self.actor(normalized, deterministic=True)
        return actions


def export_onnx(
    policy: InferencePolicy, out: Path, meta: dict[str, Any], task: dict[str, Any] | None = None
) -> tuple[Path, Path]:
    """Write ``out`` (ONNX, dynamic batch) and ``out.json`` (sidecar, naming ``task``); returns both paths.

    Both are written into temporary files beside them first, then renamed: a write that fails leaves
    neither behind.

    Raises:
        OSError: A file cannot be written there.
    """
    module = DeployedPolicy(policy).cpu().eval()
    dims = meta["dims"]
    example = torch.zeros(2, dims["obs_dim"])
    sidecar = out.with_suffix(out.suffix + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    written = [path.with_name(f".{path.name}.{os.getpid()}.tmp") for path in (out, sidecar)]
    try:
        with warnings.catch_warnings():
            # The exporter warns about its own internals (version conversion, deprecations); the
            # round-trip test is what proves the graph right.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                (example,),
                str(written[0]),
                input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME],
                dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
                dynamo=False,
            )
        written[1].write_text(_sidecar_text(dims, meta, task), encoding="utf-8")
        os.replace(written[1], sidecar)
        os.replace(written[0], out)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return out, sidecar


def _sidecar_text(dims: dict[str, Any], meta: dict[str, Any], task: dict[str, Any] | None) -> str:
    """The JSON sidecar: what a deployment needs to feed the graph and read its actions."""
    return (
        json.dumps(
            {
                "format": "onnx",
                "input": {"name": INPUT_NAME, "shape": ["batch", dims["obs_dim"]], "dtype": "float32"},
                "output": {"name": OUTPUT_NAME, "shape": ["batch", dims["act_dim"]], "dtype": "float32"},
                "obs_dim": dims["obs_dim"],
                "act_dim": dims["act_dim"],
                "action_low": list(dims["action_low"]),
                "action_high": list(dims["action_high"]),
                "normalizer_folded": True,
                "deterministic": True,
                "task": task,
                "counters": {k: int(v) for k, v in meta["counters"].items()},
                "extra": {k: v for k, v in meta["extra"].items() if isinstance(v, (int, float, str))},
            },
            indent=2,
        )
        + "\n"
    )


def _trained_task(run_dir: Path | None) -> dict[str, Any] | None:
    """The task and env of the run in ``run_dir`` (its ``config.yaml``); None for a checkpoint of no run."""
    if run_dir is None or not RunLayout(run_dir).config.is_file():
        return None
    from omegaconf import OmegaConf

    try:
        config: Any = OmegaConf.to_container(OmegaConf.load(RunLayout(run_dir).config), resolve=True)
        return {key: config["task"].get(key) for key in _TASK_KEYS}
    except Exception:  # a config.yaml edited out of shape: the sidecar names no task rather than failing
        return None


def export_main(args: list[str]) -> int:
    """``trainer export checkpoint=PATH [format=onnx] [out=FILE]``."""
    options = parse(args, EXPORT).options
    fmt = options.get("format", "onnx")
    if fmt != "onnx":
        raise TrainerAppError(f"format={fmt!r} is invalid: use format=onnx")
    checkpoint, run_dir = resolve_resume(options["checkpoint"], "checkpoint")
    out = Path(options["out"]) if "out" in options else checkpoint.with_suffix(".onnx")
    if out.suffix.lower() != ".onnx":  # never a checkpoint's name (.pt), never the checkpoint itself
        raise TrainerAppError(
            f"out={str(out)!r} is invalid: an ONNX model's file ends in .onnx; e.g. out={out.stem}.onnx"
        )
    policy, meta = load_policy(checkpoint)
    try:
        model, sidecar = export_onnx(policy, out, meta, _trained_task(run_dir))
    except OSError as error:
        raise TrainerAppError(
            f"out={str(out)!r} is invalid: it cannot be written ({error.strerror or error}); choose a file "
            "in a folder you can write, e.g. out=policy.onnx"
        ) from None
    sys.stdout.write(f"exported {checkpoint} -> {model} (+ {sidecar.name})\n")
    return 0
