"""The evaluator process: a deterministic CPU policy, the weights rank 0 publishes, envs of its own.

It receives the reader of rank 0's first weight channel through the startup handshake (the handle
the collector got: host or CUDA IPC, whichever the learner opened), reports ready like every worker,
and after the release evaluates whenever due (Note [evaluation during training] in
``fastsac_async.evaluator.loop``), sending each :class:`~fastsac_async.evaluator.loop.EvalReport` on
its stats queue. It runs at a lower CPU priority (nice +10) with one thread, so collectors and
learners sharing its CPUs go first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from fastsac_async.control import Control
from fastsac_async.evaluator.loop import Evaluator, PublishedWeights
from fastsac_async.run_layout import RunLayout
from fastsac_async.spec import EngineSpec
from fastsac_async.stats import offer
from fastsac_async.worker_process import evaluator_name, worker_boot
from fastsac_core import InferencePolicy, peek_checkpoint
from shm_transport import StartupHandshake, WeightReaderHandle

__all__ = ["NICENESS", "run_evaluator"]

_log = logging.getLogger(__name__)

NICENESS = 10
"""How much lower the evaluator's CPU priority is than the other workers' (``os.nice``)."""

_IDLE_S = 0.05
"""Pause between two checks of whether an evaluation is due (and of the stop flag)."""


def run_evaluator(
    *,
    name: str,
    run_dir: Path,
    parent_pid: int,
    threads: int,
    spec: EngineSpec,
    control: Control,
    handshake: StartupHandshake,
    stats_queue: Any,
) -> None:
    """Evaluator process: build the policy, receive the weight reader, then evaluate whenever due."""
    run = spec.run
    assert run.evaluation is not None, "the engine spawns an evaluator only with evaluation settings"
    with (
        worker_boot(
            name=name, run_dir=run_dir, parent_pid=parent_pid, threads=threads, cpus=None, node=None,
            seed_value=run.seed + 2000, stats_queue=stats_queue,
        ) as boot,
        contextlib.ExitStack() as cleanup,
    ):  # fmt: skip
        os.nice(NICENESS)
        policy = InferencePolicy(run.dims, spec.agent, device="cpu", deterministic=True)
        start = 0 if run.resume_from is None else int(peek_checkpoint(run.resume_from)["extra"]["iteration"])
        evaluator = Evaluator(
            settings=run.evaluation, policy=policy, env_factory=run.env_factory, dims=run.dims,
            agent=spec.agent, best_path=RunLayout(run_dir).best_checkpoint,
            clip_file=RunLayout(run_dir).eval_clip, start_gstep=start,
        )  # fmt: skip
        run.env_factory(1, run.evaluation.seed).close()  # imports and first-build costs go to the boot
        boot.mark(f"policy built, env made once (best so far: {evaluator.best_return:g})")
        handle: WeightReaderHandle = handshake.receive(
            evaluator_name(),
            timeout_s=spec.options.boot_timeout_s,
            should_stop=lambda: control.stop_requested,
        )
        reader = handle.open_reader()
        cleanup.callback(reader.close)  # before the learner frees CUDA-IPC slots: the first shutdown group
        weights = PublishedWeights(reader, policy)
        boot.mark("weight reader of learner 0's first channel opened")
        handshake.report_ready(name)
        handshake.wait_released(
            timeout_s=spec.options.boot_timeout_s, should_stop=lambda: control.stop_requested
        )
        boot.released()
        evaluated = 0  # the version last evaluated
        while not control.stop_requested:
            if evaluator.due(control.global_step) and (weights.refresh() or weights.version > evaluated):
                report = evaluator.evaluate(
                    gstep=weights.gstep, version=weights.version, should_stop=lambda: control.stop_requested
                )
                if report is not None:
                    evaluated = weights.version
                    offer(stats_queue, report)  # the evaluator logged it
            time.sleep(_IDLE_S)
        _log.info("%s stopped (best return %g)", name, evaluator.best_return)
