"""The evaluator's logic, drivable in-process: when to evaluate, the evaluation, the best checkpoint.

# Note [evaluation during training]
An :class:`Evaluator` runs the deterministic policy (``fastsac_core.evaluate_policy``, the definition
``trainer eval`` uses) on envs of its own, never a collector's, every ``EvalSettings.interval_s``
seconds or ``interval`` global steps. The asynchronous run gives it a process of its own (the
evaluator worker, ``evaluator.process``) that reads the weights from the seqlock channel rank 0
writes for its first collector (:class:`PublishedWeights`, never waiting for the writer), so neither
the learner nor a collector ever waits for an evaluation. Each snapshot carries the global step it
was published at (``transport.PUBLISHED_GSTEP``), so a result is logged at the env steps of the weights
it evaluated, not at those of the moment it finished. The synchronous trainer calls the same
:class:`Evaluator` between iterations (wiki/decisions.md, 2026-12-01).

The best checkpoint (``checkpoints/best.pt``, a policy checkpoint: ``fastsac_core.
save_policy_checkpoint``) is written, atomically, only when an evaluation's mean return beats every
earlier one; it holds the weights that were evaluated and, in ``extra``, their return, episode count,
seed and global step. A resumed run reads the return of the best checkpoint already there, so it
never replaces a better best with a worse one.

With ``EvalSettings.video_every`` = K, the 1st, (K+1)-th, ... evaluation of a launch also records
one episode of the same weights with ``EvalSettings.video`` (``RunLayout.eval_clip``: the global
step is in the name); the report names the file. A clip that fails is skipped (a renderer's trouble
never stops training): the report says why in one line (``EvalReport.video_error``, the
exception's :func:`~fastsac_async.worker_process.exception_line`), and the log holds the traceback of
the launch's first failed clip (each report is logged too, its reason with it). The app keeps this
module's records off its console (its reporter says each evaluation): they are the run's log's.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from fastsac_async.eval_settings import EvalSettings
from fastsac_async.transport import PUBLISHED_GSTEP, published_stamp
from fastsac_async.worker_process import exception_line
from fastsac_core import (
    CheckpointError,
    EnvDims,
    EnvFactory,
    FastSACConfig,
    InferencePolicy,
    evaluate_policy,
    peek_checkpoint,
    save_policy_checkpoint,
)
from shm_transport import WeightReader

__all__ = ["EvalReport", "Evaluator", "PublishedWeights", "best_return_of"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class EvalReport:
    """One finished evaluation (what the evaluator sends the parent)."""

    global_step: int
    """Global step at which the evaluated weights were published."""
    weight_version: int
    """Version of the evaluated weights (0: not read from a channel)."""
    mean_return: float
    """Mean undiscounted return of the episodes."""
    mean_length: float
    """Mean episode length, in env steps."""
    episodes: int
    """Episodes run."""
    seconds: float
    """Wall time the evaluation took."""
    best: bool
    """This evaluation is the best so far (it was written as the best checkpoint)."""
    best_return: float
    """The best mean return so far (this one's included)."""
    video: str | None = None
    """The clip recorded of these weights, if one was (``EvalSettings.video_every``)."""
    video_error: str | None = None
    """Why the clip due with this evaluation was not recorded (one line: the error's
    :func:`~fastsac_async.worker_process.exception_line`), if it failed."""


def best_return_of(path: Path | None) -> float:
    """The return the best checkpoint at ``path`` was kept for; -inf if there is none or it is unreadable."""
    if path is None or not path.is_file():
        return -math.inf
    try:
        return float(peek_checkpoint(path)["extra"].get("eval_return", -math.inf))
    except CheckpointError as error:
        _log.warning("ignoring the best checkpoint %s: %s", path, error)
        return -math.inf


class Evaluator:
    """Evaluates a policy when due and keeps the best one (Note [evaluation during training]).

    Args:
        settings: Cadence, episodes and seed.
        policy: A deterministic policy (CPU); the caller loads the weights to evaluate into it.
        env_factory: Makes the evaluation envs.
        dims: Task dimensions (stored in the best checkpoint).
        agent: Hyper-parameters the policy was built with (stored in the best checkpoint).
        best_path: Where the best checkpoint goes (None: nowhere); one already there sets the bar.
        clip_file: The file of the clip of the weights of a global step (``RunLayout.eval_clip`` of
            the run folder); None: no clips, whatever the settings say.
        start_gstep: Global step the run starts at (a resume's).
        clock: Seconds, monotonic (tests pass their own).
    """

    def __init__(
        self,
        *,
        settings: EvalSettings,
        policy: InferencePolicy,
        env_factory: EnvFactory,
        dims: EnvDims,
        agent: FastSACConfig,
        best_path: Path | None,
        clip_file: Callable[[int], Path] | None = None,
        start_gstep: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.policy = policy
        self._factory = env_factory
        self._dims = dims
        self._agent = agent
        self.best_path = best_path
        self.best_return = best_return_of(best_path)
        self._clock = clock
        self._last_t = clock()
        self._last_gstep = start_gstep
        self._clip_file = clip_file
        self._evaluations = 0  # finished in this launch
        self._clip_failures = 0  # in this launch

    def due(self, gstep: int) -> bool:
        """Whether an evaluation is due at global step ``gstep`` (either interval since the last one)."""
        s = self.settings
        by_time = s.interval_s is not None and self._clock() - self._last_t >= s.interval_s
        by_steps = s.interval is not None and gstep - self._last_gstep >= s.interval
        return by_time or by_steps

    def evaluate(
        self, *, gstep: int, version: int = 0, should_stop: Callable[[], bool] = lambda: False
    ) -> EvalReport | None:
        """Evaluate the policy's current weights, published at ``gstep``; None if stopped meanwhile.

        The interval counts from this call (the start of an evaluation). A new best is written to
        ``best_path`` before this returns.
        """
        s = self.settings
        self._last_t = started = self._clock()
        self._last_gstep = gstep
        result = evaluate_policy(self.policy, self._factory, s.episodes, s.seed, should_stop)
        if result is None:
            return None
        best = result.mean_return > self.best_return
        if best:
            self.best_return = result.mean_return
            if self.best_path is not None:
                save_policy_checkpoint(
                    self.best_path, self.policy, self._dims, self._agent,
                    extra={"iteration": gstep, "weight_version": version, "eval_return": result.mean_return,
                           "eval_episode_length": result.mean_length, "eval_episodes": s.episodes,
                           "eval_seed": s.seed},
                )  # fmt: skip
        self._evaluations += 1
        video, video_error = self._record_clip(gstep, should_stop)
        report = EvalReport(
            global_step=gstep,
            weight_version=version,
            mean_return=result.mean_return,
            mean_length=result.mean_length,
            episodes=s.episodes,
            seconds=self._clock() - started,
            best=best,
            best_return=self.best_return,
            video=None if video is None else str(video),
            video_error=video_error,
        )
        _log.info("%s", report)
        return report

    def _record_clip(self, gstep: int, should_stop: Callable[[], bool]) -> tuple[Path | None, str | None]:
        """The clip of the policy's weights when this evaluation is one to record, or why it failed."""
        s = self.settings
        if s.video is None or not s.video_every or self._clip_file is None:
            return None, None
        if (self._evaluations - 1) % s.video_every:
            return None, None
        out = self._clip_file(gstep)
        try:
            written = s.video(self.policy, s.seed, out, should_stop)
        except Exception as error:  # a renderer's failure costs the clip, never the run
            reason = exception_line(error)
            self._clip_failures += 1
            first = self._clip_failures == 1  # the traceback once; the report carries every reason
            _log.log(logging.WARNING if first else logging.DEBUG, "the clip of global step %d failed (%s)",
                     gstep, reason, exc_info=first)  # fmt: skip
            return None, reason
        if written is None:
            return None, None
        _log.info("clip of global step %d: %s", gstep, written)
        return written, None


class PublishedWeights:
    """The newest weights of a seqlock channel, loaded into an evaluator's policy (never waits).

    Args:
        reader: A reader of the channel (host, or CUDA IPC).
        policy: The policy that receives the weights.
    """

    def __init__(self, reader: WeightReader, policy: InferencePolicy) -> None:
        self._reader = reader
        self._policy = policy
        self._flat = torch.zeros(policy.numel)
        self._extras: dict[str, Tensor] = {**policy.policy_extras(), PUBLISHED_GSTEP: published_stamp(0)}
        self.version = 0
        """Version loaded into the policy (0: none yet)."""
        self.gstep = 0
        """Global step at which the loaded version was published."""

    def refresh(self) -> bool:
        """Load a newer snapshot into the policy if there is one; True if one was loaded."""
        version = self._reader.poll(self._flat, self._extras)
        if version is None:
            return False
        if torch.cuda.is_initialized():  # type: ignore[no-untyped-call] # a CUDA-IPC reader's copy to these host tensors has landed
            torch.cuda.synchronize()
        self._policy.load_flat(self._flat, self._extras)
        self.version = version
        self.gstep = int(self._extras[PUBLISHED_GSTEP][0])
        return True
