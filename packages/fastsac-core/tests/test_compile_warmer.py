"""A compile warmer fills the compile cache from its own process for the background compile (its Note)."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
import torch

from fastsac_core import ExecutionPolicy
from fastsac_core._background_compile import BackgroundCompile
from fastsac_core._compile_warmer import CompileWarmer, WarmerJob, warmer_refusal
from fastsac_core._warmer_process import build
from fastsac_core.testing import TINY_DIMS, make_agent, tiny_config

WAIT_S = 300.0
"""Bound on a warmer or a build (a cold CPU compile of the tiny agent: wiki/benchmarks.md)."""

# An agent that compiles in the background with a warmer, trained until it switches; then what its own
# process compiled and found in the cache, and the log lines of the warmer and the switch.
_SWITCH = """
import json, logging, sys, time
from dataclasses import replace
import torch
from torch._dynamo.utils import counters
lines = []
class Keep(logging.Handler):
    def emit(self, record): lines.append(record.getMessage())
logging.getLogger("fastsac_core").addHandler(Keep())
logging.getLogger("fastsac_core").setLevel(logging.INFO)
from fastsac_core import ExecutionPolicy
from fastsac_core.testing import TINY_DIMS, make_agent, random_batch, random_noise, tiny_config
torch.set_num_threads(1)
device = sys.argv[1]
cfg = tiny_config(compile=True, compile_in_background=True, compile_warmer=True, amp=False)
chosen = ExecutionPolicy.choose(cfg, torch.device(device), 1)
execution = replace(chosen, compile_steps=True, compile_prepare=True, background=True)
agent = make_agent(TINY_DIMS, cfg, device, num_envs=4, execution=execution)
g = torch.Generator().manual_seed(0)
deadline = time.monotonic() + float(sys.argv[2])
while not agent.compiled and time.monotonic() < deadline:
    noise = random_noise(256, TINY_DIMS, g)
    agent.update_on_batch(random_batch(256, TINY_DIMS, g), 4, type(noise)(*(t.to(device) for t in noise)))
    time.sleep(0.05)
metrics = agent.update_on_batch(random_batch(256, TINY_DIMS, g), 4)
agent.close()
print(json.dumps({"compiled": agent.compiled, "lines": lines, "finite": all(
    bool(torch.isfinite(v).all()) for v in metrics.values()), **counters["inductor"]}))
"""


def _switch_in_a_fresh_cache(tmp_path: Path, device: str) -> dict[str, object]:
    """Run ``_SWITCH`` in a new interpreter whose compile cache is an empty folder under ``tmp_path``."""
    chosen = ("TORCHINDUCTOR_CACHE_DIR", "FASTSAC_COMPILE_CACHE")
    environ = {k: v for k, v in os.environ.items() if k not in chosen}
    environ.update(
        XDG_CACHE_HOME=str(tmp_path / "xdg"), OMP_NUM_THREADS="1", TORCHINDUCTOR_COMPILE_THREADS="1",
        TORCHINDUCTOR_VEC_ISA_OK="0",  # scalar C++ kernels: half the g++ time on a CPU
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", _SWITCH, device, str(WAIT_S)], env=environ, capture_output=True, text=True,
        timeout=WAIT_S + 120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _check_switch_from_the_warm_cache(result: dict[str, object]) -> None:
    lines = [str(line) for line in result["lines"]]  # type: ignore[attr-defined]
    done = [line for line in lines if line.startswith("compile warmer done")]
    assert len(done) == 1 and re.search(r"\b0 found in the cache", done[0]), lines
    switched = [line for line in lines if line.startswith("compiled update ready after")]
    assert len(switched) == 1 and "from the compile cache, 0 compiled)" in switched[0], lines
    assert result["compiled"] and result["finite"], result
    # The agent's own build compiled nothing: every graph came from the warmer's entries.
    assert result.get("fxgraph_cache_miss", 0) == 0 and int(result.get("fxgraph_cache_hit", 0)) >= 1, result  # type: ignore[call-overload]


@pytest.mark.slow
def test_a_warmer_fills_the_cache_and_the_background_build_compiles_nothing_itself(tmp_path: Path) -> None:
    """CPU (inductor): the warmer compiles every graph, the agent's build finds them all, then switches."""
    _check_switch_from_the_warm_cache(_switch_in_a_fresh_cache(tmp_path, "cpu"))


@pytest.mark.gpu
def test_a_warmer_fills_the_cache_for_a_cuda_background_build(tmp_path: Path) -> None:
    """CUDA (inductor, Triton, step graphs): the agent's build finds every graph the warmer compiled."""
    _check_switch_from_the_warm_cache(_switch_in_a_fresh_cache(tmp_path, "cuda"))


def _job(**changes: object) -> WarmerJob:
    cfg = tiny_config()
    chosen = ExecutionPolicy.choose(cfg, torch.device("cpu"), 1)
    execution = replace(chosen, compile_steps=True, backend="aot_eager")
    job = WarmerJob(
        dims=TINY_DIMS, cfg=cfg, execution=execution, device="cpu", num_envs=4, world_size=1, updates=4
    )
    return replace(job, **changes)  # type: ignore[arg-type]


def test_the_warmer_body_builds_in_process() -> None:
    """build(job), the warmer's body, traces the agent's steps in the calling process and says so."""
    torch._dynamo.reset()
    result = build(_job())
    assert result["ok"] is True and result["graphs_traced"] >= 2, result  # a critic and an actor step


def test_a_failed_warmer_costs_one_warning_and_the_thread_compiles_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failing warmer (its batch cannot split over its envs): one warning with its error, then a build."""
    warmer = CompileWarmer.start(_job(num_envs=7))  # batch_size 64
    agent = make_agent(TINY_DIMS, tiny_config(), num_envs=4, execution=_job().execution)
    build_ = BackgroundCompile(agent, 4, warmer=warmer)
    with caplog.at_level(logging.INFO, logger="fastsac_core._background_compile"):
        build_.start()
        assert build_.wait(WAIT_S)
    assert build_.steps is not None, build_.error
    said = [r for r in caplog.records if "compile warmer" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING, [r.getMessage() for r in said]
    message = said[0].getMessage()
    assert (
        message.startswith("compile warmer failed after ") and "ConfigError: agent.batch_size=64" in message
    ), message


def test_closing_the_agent_kills_its_warmer_and_leaves_no_process() -> None:
    """close() before the warmer ends: it is killed and reaped, no child process of the test is left."""
    cfg = tiny_config(compile_warmer=True)
    execution = replace(_job().execution, background=True, backend="inductor")
    agent = make_agent(TINY_DIMS, cfg, num_envs=4, execution=execution)
    assert agent._background is not None
    warmer = agent._background._warmer
    assert warmer is not None and psutil.pid_exists(warmer.pid)
    agent.close(timeout_s=30)
    outcome = warmer.outcome()
    assert outcome is not None and not outcome.ok and "SIGKILL" in outcome.detail, outcome
    assert not psutil.pid_exists(warmer.pid), "the killed warmer was reaped"


def test_a_warmer_starts_only_where_it_can_help(monkeypatch: pytest.MonkeyPatch) -> None:
    """warmer_refusal: a reason for compile-first, compile_warmer=false, caches off, a callable backend."""
    monkeypatch.delenv("FASTSAC_COMPILE_CACHE", raising=False)
    cfg = tiny_config(compile_warmer=True)
    background = replace(_job().execution, background=True, backend="inductor")
    assert warmer_refusal(cfg, background) is None
    assert warmer_refusal(cfg, replace(background, background=False)) is not None
    assert warmer_refusal(replace(cfg, compile_warmer=False), background) == "algo.agent.compile_warmer=false"
    assert "aot_eager" in str(warmer_refusal(cfg, replace(background, backend="aot_eager")))
    assert warmer_refusal(cfg, replace(background, backend=lambda gm, inputs: gm)) is not None
    with torch.compiler.config.patch(force_disable_caches=True):  # torch's own switch (its config module)
        assert str(warmer_refusal(cfg, background)).startswith("torch's compile caches are off")
    monkeypatch.setenv("FASTSAC_COMPILE_CACHE", "off")
    assert warmer_refusal(cfg, background) == "the compile cache is off"
