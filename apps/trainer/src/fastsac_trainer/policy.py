"""A trained policy from Python: ``policy = load_policy("runs/<run>")``, then ``policy.act(obs)``.

:func:`load_policy` rebuilds the policy ``trainer eval`` runs (``fastsac_trainer.evaluate.load_policy``:
a :class:`fastsac_core.InferencePolicy` with the checkpoint's actor and observation normalizer) and
wraps it in a :class:`Policy`, whose :meth:`Policy.act` takes what a user has at hand: one observation
or a batch, as a numpy array (or anything ``numpy.asarray`` takes) or a torch tensor, and answers in
the same kind.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, overload

import numpy as np
import numpy.typing as npt
import torch

from fastsac_core import InferencePolicy

__all__ = ["Policy", "load_policy"]


class Policy:
    """A checkpoint's actor with its observation normalizer: raw observations in, actions out.

    Built by :func:`load_policy`.

    Args:
        inference: The policy ``trainer eval`` runs (actor + frozen normalizer).
        checkpoint: The checkpoint file it was loaded from.
        meta: The checkpoint's metadata (``fastsac_core.peek_checkpoint``).
    """

    def __init__(self, inference: InferencePolicy, checkpoint: Path, meta: dict[str, Any]) -> None:
        dims = meta["dims"]
        self.checkpoint = checkpoint
        """The checkpoint file the policy was loaded from."""
        self.obs_dim: int = dims["obs_dim"]
        """Length of one observation."""
        self.act_dim: int = dims["act_dim"]
        """Length of one action."""
        self.action_low = np.asarray(dims["action_low"], dtype=np.float32)
        """Lower bound of each action dimension (every action is within the bounds)."""
        self.action_high = np.asarray(dims["action_high"], dtype=np.float32)
        """Upper bound of each action dimension."""
        self.counters: dict[str, int] = {k: int(v) for k, v in meta["counters"].items()}
        """The checkpoint's training counters (``global_step``, ...)."""
        self._inference = inference

    @property
    def device(self) -> torch.device:
        """Where the actor runs."""
        return self._inference.device

    @property
    def deterministic(self) -> bool:
        """Whether :meth:`act` returns the squashed mean action (else a sample of the policy)."""
        return self._inference.deterministic

    @overload
    def act(self, obs: torch.Tensor) -> torch.Tensor: ...

    @overload
    def act(self, obs: npt.ArrayLike) -> npt.NDArray[np.float32]: ...

    def act(self, obs: torch.Tensor | npt.ArrayLike) -> torch.Tensor | npt.NDArray[np.float32]:
        """Actions for raw observations: ``(act_dim,)`` for one ``(obs_dim,)``, ``(B, act_dim)`` for a batch.

        A torch tensor gives a float32 tensor on the tensor's device; anything else (a numpy array, a
        list) a float32 numpy array. The observation normalizer is applied here: pass the env's
        observations as they are.

        Raises:
            ValueError: ``obs`` is neither one observation nor a batch of them.
        """
        if isinstance(obs, torch.Tensor):
            single = self._is_single(tuple(obs.shape))
            actions = self._inference(obs.reshape(-1, self.obs_dim))
            # A copy out of inference mode: the caller may use it in autograd.
            out = actions.to(obs.device).clone()
            return out[0] if single else out
        array = np.asarray(obs, dtype=np.float32)
        single = self._is_single(array.shape)
        batch = torch.from_numpy(np.ascontiguousarray(array.reshape(-1, self.obs_dim)))
        result: npt.NDArray[np.float32] = self._inference(batch).cpu().numpy()
        return result[0] if single else result

    def _is_single(self, shape: tuple[int, ...]) -> bool:
        """Whether ``shape`` is one observation (else a batch).

        Raises:
            ValueError: It is neither ``(obs_dim,)`` nor ``(B, obs_dim)``.
        """
        if shape == (self.obs_dim,):
            return True
        if len(shape) == 2 and shape[1] == self.obs_dim:
            return False
        raise ValueError(
            f"obs has shape {shape}; this policy takes one observation of shape ({self.obs_dim},) or a batch "
            f"of shape (B, {self.obs_dim})"
        )


def load_policy(
    checkpoint: str | os.PathLike[str], *, device: str | torch.device = "cpu", deterministic: bool = True
) -> Policy:
    """The trained policy of ``checkpoint``, ready to act: ``load_policy("runs/<run>").act(obs)``.

    Args:
        checkpoint: A run folder (its latest checkpoint) or a checkpoint file
            (``runs/<run>/checkpoints/best.pt``: the policy of the best evaluation).
        device: Where the actor runs: ``cpu``, ``cuda`` or ``cuda:N``.
        deterministic: Act with the squashed mean action, as ``trainer eval`` does; False samples.

    Returns:
        The policy: :meth:`Policy.act` on numpy arrays or torch tensors, one observation or a batch.

    Raises:
        TrainerAppError: No such file or folder, a folder without checkpoints, a file that is not a
            checkpoint, or a device this machine does not have.
    """
    from fastsac_trainer.evaluate import load_policy as load_inference_policy
    from fastsac_trainer.run_dir import resolve_resume

    file, _ = resolve_resume(os.fspath(checkpoint), "checkpoint")
    inference, meta = load_inference_policy(file, str(device))
    inference.deterministic = deterministic
    return Policy(inference, file, meta)
