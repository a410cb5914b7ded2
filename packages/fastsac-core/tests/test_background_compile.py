"""Training while the update steps compile in the background (Note [Compile in the background])."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
import torch

from fastsac_core import ConfigError, ExecutionPolicy, FastSACAgent
from fastsac_core._step_graph import StepGraph
from fastsac_core.testing import TINY_DIMS, make_agent, random_batch, random_noise, tiny_config

WAIT_S = 300.0
"""Bound on waiting for a background compile (a dynamo trace of both steps; slow on a loaded CPU)."""


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    """Each test compiles from scratch (dynamo's recompile limit would quietly run steps eagerly)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _cpu_policy(background: bool, backend: str | Callable[..., Any] = "aot_eager") -> ExecutionPolicy:
    """Compiled whole steps on CPU (dynamo and AOT autograd; inductor's C++ build would take minutes)."""
    chosen = ExecutionPolicy.choose(tiny_config(), torch.device("cpu"), 1)
    return replace(chosen, compile_steps=True, background=background, backend=backend)


def _train(agent: FastSACAgent, calls: int, generator: torch.Generator, device: str = "cpu") -> None:
    for _ in range(calls):
        batch, noise = random_batch(256, TINY_DIMS, generator), random_noise(256, TINY_DIMS, generator)
        agent.update_on_batch(batch, 4, type(noise)(*(t.to(device) for t in noise)))


def _state(agent: FastSACAgent) -> list[torch.Tensor]:
    m = agent.model
    return [*m.actor.parameters(), *m.qf.parameters(), *m.qf_target.parameters(), m.log_alpha.detach()]


def _switch_matches_compiled(compiled: FastSACAgent, switching: FastSACAgent, device: str) -> None:
    """Both train 2 calls, the background compile ends, both train 2 more: switched late, same weights."""
    assert not switching.compiled and compiled.compiled
    start = switching.update_idx  # a loaded state brings its update count with it
    g_compiled, g_switching = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    _train(switching, 2, g_switching, device)  # first: the compile has not ended yet
    assert switching._background is not None and switching._background.wait(WAIT_S)
    _train(compiled, 2, g_compiled, device)
    _train(compiled, 2, g_compiled, device)
    _train(switching, 2, g_switching, device)
    assert switching.compiled_at is not None and start < switching.compiled_at <= start + 8
    for a, b in zip(_state(compiled), _state(switching), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)


def test_switch_to_background_compiled_steps_matches_an_all_compiled_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Eager updates, then the background-compiled steps: the same weights as compiled throughout."""
    cfg = tiny_config()
    torch.manual_seed(0)
    compiled = make_agent(TINY_DIMS, cfg, num_envs=4, execution=_cpu_policy(False))
    torch.manual_seed(0)
    switching = make_agent(TINY_DIMS, cfg, num_envs=4, execution=_cpu_policy(True))
    with caplog.at_level(logging.INFO, logger="fastsac_core._agent"):
        _switch_matches_compiled(compiled, switching, "cpu")
    lines = [r.getMessage() for r in caplog.records if "switched at update" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("compiled update ready after ")


def test_a_failed_background_compile_keeps_training_eagerly_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A compile that raises leaves the eager steps training, with one warning naming the reason."""

    def broken(graph: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> Callable[..., Any]:
        raise RuntimeError("injected compile failure")

    agent = make_agent(TINY_DIMS, tiny_config(), num_envs=4, execution=_cpu_policy(True, broken))
    assert agent._background is not None and agent._background.wait(WAIT_S)
    before = agent.flatten_actor_params().clone()
    with caplog.at_level(logging.WARNING, logger="fastsac_core._agent"):
        _train(agent, 2, torch.Generator().manual_seed(2))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "injected compile failure" in warnings[0], warnings
    assert not agent.compiled and not torch.equal(before, agent.flatten_actor_params())


def test_only_one_cuda_rank_with_compiled_whole_steps_compiles_in_the_background() -> None:
    """choose() compiles in the background only for one CUDA rank without region graphs, when asked."""
    cfg, cuda = tiny_config(compile=True, compile_in_background=True), torch.device("cuda")
    assert ExecutionPolicy.choose(cfg, cuda, 1).background
    assert not ExecutionPolicy.choose(cfg, torch.device("cpu"), 1).background
    assert not ExecutionPolicy.choose(cfg, cuda, 2).background
    assert not ExecutionPolicy.choose(replace(cfg, cudagraph_scope="regions"), cuda, 1).background
    assert not ExecutionPolicy.choose(replace(cfg, compile_in_background=False), cuda, 1).background
    with pytest.raises(ConfigError, match="background=True needs compiled whole steps"):
        replace(ExecutionPolicy.choose(cfg, cuda, 2), background=True)


def test_the_interim_steps_are_eager_and_keep_whole_step_graphs() -> None:
    """interim(): no compile, no background; the whole-step graphs stay (around the eager steps)."""
    cfg, cuda = tiny_config(compile=True, compile_in_background=True), torch.device("cuda")
    step = ExecutionPolicy.choose(cfg, cuda, 1).interim()
    assert not (step.compile_steps or step.compile_prepare or step.background) and step.graphs == "step"


def test_a_build_closed_before_its_start_never_starts() -> None:
    """close() before start(): the thread never starts, nothing is joined, the build is not running."""
    from fastsac_core._background_compile import BackgroundCompile

    agent = make_agent(TINY_DIMS, tiny_config(), num_envs=4, execution=_cpu_policy(False))
    build = BackgroundCompile(agent, 4)
    assert not build.started
    build.close(timeout_s=0.1)
    build.start()
    assert not build.started and not build.running and not build.done()


def test_the_compile_thread_builds_inside_the_context_its_owner_gives() -> None:
    """compile_context is entered on the compile thread around the whole build, and left after it."""
    import contextlib
    import threading

    events: list[tuple[str, str]] = []

    @contextlib.contextmanager
    def recording() -> Iterator[None]:
        events.append(("enter", threading.current_thread().name))
        yield
        events.append(("exit", threading.current_thread().name))

    agent = make_agent(
        TINY_DIMS, tiny_config(), num_envs=4, execution=_cpu_policy(True), compile_context=recording
    )
    assert agent._background is not None and agent._background.wait(WAIT_S)
    assert agent._background.steps is not None, agent._background.error
    assert events == [("enter", "background-compile"), ("exit", "background-compile")]


@pytest.mark.gpu
def test_switch_to_background_compiled_step_graphs_matches_on_cuda() -> None:
    """On CUDA (inductor, step graphs): captured eager steps, then the switch; compiled weights."""
    cfg = tiny_config(compile=True, cudagraphs=True, cudagraph_scope="step", amp=False)
    torch.manual_seed(0)
    compiled = make_agent(TINY_DIMS, cfg, "cuda", num_envs=4)
    torch.manual_seed(0)
    switching = make_agent(TINY_DIMS, replace(cfg, compile_in_background=True), "cuda", num_envs=4)
    assert switching.execution.background and switching.execution.graphs == "step"
    interim, build = switching.steps.critic, switching._background
    assert isinstance(interim, StepGraph) and build is not None and not build.started
    for agent in (compiled, switching):  # 8 critic and 4 actor steps: both captured, then the start
        _train(agent, 2, torch.Generator().manual_seed(9), "cuda")
    assert interim.captured and build.started  # never a capture beside the compile thread
    _switch_matches_compiled(compiled, switching, "cuda")
    assert isinstance(switching.steps.critic, StepGraph) and switching.steps.critic.captured
    assert isinstance(switching.steps.actor, StepGraph) and switching.steps.actor.captured


def test_the_compile_thread_gets_cudagraph_tree_state_of_its_own() -> None:
    """A fresh thread gets inductor's per-thread CUDA graph state, not the importing thread's."""
    import threading

    from torch._inductor import cudagraph_trees as trees

    from fastsac_core._background_compile import give_thread_cudagraph_state

    main = trees.get_obj(trees.local, "tree_manager_containers")
    seen: list[object] = []

    def run() -> None:
        give_thread_cudagraph_state()
        seen.append(hasattr(trees.local, "tree_manager_containers"))  # set here, not by a later first use
        seen.append(trees.get_obj(trees.local, "tree_manager_containers"))
        seen.append(trees.get_obj(trees.local, "tree_manager_locks")[0])

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert len(seen) == 3 and seen[0] is True and seen[1] == {} and seen[1] is not main


@pytest.mark.gpu
def test_a_switch_after_a_state_load_matches_an_all_compiled_agent_on_cuda() -> None:
    """A resume on CUDA: a state loaded before the switch, then the same weights as compiled throughout."""
    cfg = tiny_config(compile=True, cudagraphs=True, cudagraph_scope="step", amp=False)
    torch.manual_seed(3)
    source = make_agent(TINY_DIMS, replace(cfg, compile=False, cudagraphs=False), "cuda", num_envs=4)
    _train(source, 2, torch.Generator().manual_seed(3), "cuda")  # optimizer state with steps behind it
    state = source.state_dict()
    compiled = make_agent(TINY_DIMS, cfg, "cuda", num_envs=4)
    switching = make_agent(TINY_DIMS, replace(cfg, compile_in_background=True), "cuda", num_envs=4)
    compiled.load_state_dict(state)
    switching.load_state_dict(state)  # after the thread copied the fresh model: the switch copies this
    _switch_matches_compiled(compiled, switching, "cuda")


@pytest.mark.gpu
def test_a_capture_due_while_the_compile_runs_waits_for_its_end() -> None:
    """A state load after the thread started: updates run uncaptured until the build ends, then switch."""
    cfg = tiny_config(compile=True, cudagraphs=True, cudagraph_scope="step", amp=False)
    agent = make_agent(TINY_DIMS, replace(cfg, compile_in_background=True), "cuda", num_envs=4)
    g = torch.Generator().manual_seed(4)
    _train(agent, 2, g, "cuda")  # 8 critic and 4 actor steps: both captured, then the thread starts
    build, interim = agent._background, agent.steps.critic
    assert build is not None and build.started and isinstance(interim, StepGraph) and interim.captured
    file = io.BytesIO()  # a copy, as a checkpoint is
    torch.save(agent.state_dict(), file)
    file.seek(0)
    agent.load_state_dict(torch.load(file, weights_only=False))  # drops the captured graphs
    _train(agent, 2, g, "cuda")  # 8 more critic steps: past the warm-up, yet no capture
    assert build.running and not interim.captured  # the compile takes seconds; these calls do not
    assert build.wait(WAIT_S)
    _train(agent, 1, g, "cuda")
    assert agent.compiled
