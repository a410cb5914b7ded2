"""A standalone policy for collectors: the actor plus a read-only observation normalizer."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from ._compile_cache import use_compile_cache
from ._flat import numel_of, unflatten_into
from ._model import build_actor
from ._normalizer import EmpiricalNormalizer
from ._schema import load_policy_extras, policy_extras
from .config import FastSACConfig
from .env import EnvDims

__all__ = ["InferencePolicy"]


class InferencePolicy:
    """Actor + frozen normalizer, loaded from a flat weight vector and ``policy_extras``.

    Collectors build this instead of a whole agent (no critics, optimizers or replay buffer).

    Args:
        dims: Task dimensions and action bounds.
        cfg: Hyper-parameters (actor sizes, normalizer settings).
        device: Where inference runs (CPU or CUDA).
        deterministic: Return the squashed mean instead of a sample.
        compile: ``torch.compile`` the forward (best with a fixed batch size).
        amp: Autocast to bf16 on CUDA.
    """

    def __init__(
        self,
        dims: EnvDims,
        cfg: FastSACConfig,
        *,
        device: torch.device | str = "cpu",
        deterministic: bool = False,
        compile: bool = False,
        amp: bool = False,
    ) -> None:
        self.device = torch.device(device)
        # Its weights are always loaded (load_flat) before use, so building it must not move the caller's
        # random stream: an evaluator built beside the synchronous trainer would change its training.
        with torch.random.fork_rng(devices=[]):
            actor = build_actor(dims, cfg)
        self.actor = actor.to(self.device).eval().requires_grad_(False)
        self.normalizer = EmpiricalNormalizer(
            dims.obs_dim, cfg.normalizer_eps, enabled=cfg.obs_normalization, device=self.device
        )
        self.deterministic = deterministic
        self._amp = amp and self.device.type == "cuda"
        self._params = list(self.actor.parameters())
        if compile:
            use_compile_cache()  # before the first compile (Note [compile cache])
        self._forward: Callable[[Tensor], Tensor] = torch.compile(self._act) if compile else self._act

    @property
    def numel(self) -> int:
        """Length of the flat actor parameter vector this policy loads."""
        return numel_of(self._params)

    def load_flat(self, flat: Tensor, extras: Mapping[str, Tensor]) -> None:
        """Load actor weights (``FastSACAgent.flatten_actor_params``) and ``policy_extras``."""
        unflatten_into(self._params, flat)
        load_policy_extras(self.normalizer, extras)

    def policy_extras(self) -> dict[str, Tensor]:
        """Its normalizer's statistics as ``load_flat`` takes them (fresh: mean 0, std 1, count 0)."""
        return policy_extras(self.normalizer)

    def _act(self, obs: Tensor) -> Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self._amp):
            action: Tensor = self.actor(self.normalizer.normalize(obs), deterministic=self.deterministic)
        return action.float()

    @torch.inference_mode()
    def __call__(self, obs: Tensor) -> Tensor:
        """Actions ``(B, act_dim)`` for raw observations ``(B, obs_dim)`` (moved to ``device``)."""
        return self._forward(obs.to(self.device, dtype=torch.float32, non_blocking=True))
