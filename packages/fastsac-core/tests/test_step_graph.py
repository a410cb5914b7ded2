import io
from collections.abc import Iterator

import pytest
import torch

from fastsac_core import FastSACAgent
from fastsac_core._batch import Batch, distinct_tensors
from fastsac_core._step_graph import StepGraph, _flatten, _rebuild
from fastsac_core.testing import (
    TINY_DIMS,
    TINY_SHARED_DIMS,
    make_agent,
    random_batch,
    random_noise,
    tiny_config,
)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    """Each test compiles from scratch (dynamo's recompile limit would quietly run steps eagerly)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _batch(rows: int) -> Batch:
    return Batch(*(torch.full((rows, 2), float(i)) for i in range(len(Batch._fields))))


def test_flatten_and_rebuild_keep_the_step_arguments_structure() -> None:
    """Static inputs map back onto (Batch, tensor) arguments field by field, in order."""
    batch, noise = _batch(3), torch.randn(3, 4)
    flat = _flatten([batch, noise])
    assert len(flat) == len(Batch._fields) + 1 and flat[-1] is noise
    copies = [t.clone() for t in flat]
    rebuilt_batch, rebuilt_noise = _rebuild([batch, noise], copies)
    assert isinstance(rebuilt_batch, Batch)
    assert all(torch.equal(a, b) for a, b in zip(rebuilt_batch, batch, strict=True))
    assert rebuilt_batch.valid is copies[len(Batch._fields) - 1] and rebuilt_noise is copies[-1]


def test_rebuild_keeps_plain_tuples_plain() -> None:
    """A plain tuple argument is rebuilt as a plain tuple (only named tuples take fields by position)."""
    a, b, c = torch.zeros(1), torch.ones(1), torch.full((1,), 2.0)
    rebuilt = _rebuild([(a, b), c], [c, b, a])
    assert type(rebuilt[0]) is tuple and rebuilt[0][0] is c and rebuilt[1] is a


def test_an_argument_given_twice_gets_one_static_input() -> None:
    """distinct_tensors keeps one entry per tensor object; rebuilt arguments alias where given ones did."""
    batch = _batch(3)
    shared = batch._replace(critic_obs=batch.obs, next_critic_obs=batch.next_obs)
    distinct, positions = distinct_tensors(_flatten([shared]))
    assert len(distinct) == len(Batch._fields) - 2
    assert positions[Batch._fields.index("critic_obs")] == positions[Batch._fields.index("obs")]
    statics = [t.clone() for t in distinct]
    (rebuilt,) = _rebuild([shared], [statics[k] for k in positions])
    assert isinstance(rebuilt, Batch) and rebuilt.critic_obs is rebuilt.obs
    assert rebuilt.next_critic_obs is rebuilt.next_obs and rebuilt.actions is not rebuilt.obs
    assert distinct_tensors(_flatten([batch]))[1] == list(range(len(Batch._fields)))


def test_step_graph_refuses_a_cpu_device_with_the_fix() -> None:
    """CUDA graphs need CUDA: a CPU device is refused, saying to run the step directly."""
    with pytest.raises(ValueError, match="run the step directly on CPU"):
        StepGraph(lambda: (torch.zeros(()),), torch.device("cpu"))


def test_step_scope_on_cpu_keeps_the_eager_steps() -> None:
    """cudagraph_scope='step' on a CPU agent changes nothing: eager steps, non-capturable optimizers."""
    agent = make_agent(TINY_DIMS, tiny_config(cudagraph_scope="step"), "cpu", num_envs=4)
    assert not isinstance(agent.steps.critic, StepGraph)
    assert not agent.model.critic_optimizer.param_groups[0]["capturable"]


def _train(agent: FastSACAgent, calls: int, seed: int, rows: int = 256) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    metrics: dict[str, torch.Tensor] = {}
    for _ in range(calls):
        batch, noise = random_batch(rows, agent.dims, g), random_noise(rows, agent.dims, g)
        metrics = agent.update_on_batch(batch, 4, type(noise)(*(t.cuda() for t in noise)))
    return metrics


@pytest.mark.gpu
@pytest.mark.parametrize("shared", [False, True], ids=["own_critic_obs", "critic_observes_obs"])
@pytest.mark.parametrize("compile_", [False, True], ids=["eager-captured", "compiled-captured"])
def test_whole_step_graphs_match_eager_steps(compile_: bool, shared: bool) -> None:
    """Captured whole steps (many replays, then new shapes) match eager steps' weights and metrics."""
    dims = TINY_SHARED_DIMS if shared else TINY_DIMS
    results = []
    for scope in ("regions", "step"):
        torch.manual_seed(0)
        cfg = tiny_config(compile=compile_ and scope == "step", cudagraphs=scope == "step",
                          cudagraph_scope=scope, amp=False)  # fmt: skip
        agent = make_agent(dims, cfg, "cuda", num_envs=4)
        metrics = _train(agent, 6, seed=1)  # 24 critic and 12 actor steps: warmup 3, then replays
        if scope == "step":
            assert isinstance(agent.steps.critic, StepGraph) and agent.steps.critic.captured
            assert isinstance(agent.steps.actor, StepGraph) and agent.steps.actor.captured
        metrics = _train(agent, 3, seed=2, rows=128)  # other shapes: warm-up and capture again
        results.append((agent.flatten_actor_params().cpu(), {k: v.cpu() for k, v in metrics.items()}))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-3, atol=1e-4)
    for key in results[0][1]:
        torch.testing.assert_close(results[0][1][key], results[1][1][key], rtol=1e-3, atol=1e-4)


@pytest.mark.gpu
def test_whole_step_graphs_capture_again_after_a_state_load() -> None:
    """After load_state_dict the graphs re-capture: training continues exactly like the saved agent."""
    cfg = tiny_config(compile=False, cudagraphs=True, cudagraph_scope="step", amp=False)
    torch.manual_seed(0)
    saved = make_agent(TINY_DIMS, cfg, "cuda", num_envs=4)
    _train(saved, 5, seed=2)
    file = io.BytesIO()  # a copy, as a checkpoint is: state_dict() shares the optimizers' live tensors
    torch.save(saved.state_dict(), file)
    file.seek(0)
    state = torch.load(file, weights_only=False)
    torch.manual_seed(1)
    loaded = make_agent(TINY_DIMS, cfg, "cuda", num_envs=4)
    _train(loaded, 5, seed=3)  # its own graphs, captured on its own optimizer state
    loaded.load_state_dict(state)
    _train(saved, 5, seed=4)
    _train(loaded, 5, seed=4)
    pairs = [(saved.flatten_actor_params(), loaded.flatten_actor_params())]
    pairs += list(zip(saved.model.qf.parameters(), loaded.model.qf.parameters(), strict=True))
    for a, b in pairs:
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)  # scatter_add's atomics: not bit-exact


@pytest.mark.gpu
def test_bf16_compiled_whole_step_graphs_train_finitely() -> None:
    """The candidate default (compile, whole-step graphs, bf16) trains finitely from the replay buffer."""
    torch.manual_seed(0)
    agent = make_agent(TINY_DIMS, tiny_config(compile=True, cudagraph_scope="step", amp=True), "cuda",
                         num_envs=4)  # fmt: skip
    g = torch.Generator().manual_seed(5)
    for _ in range(20):
        agent.buffer.extend({
            "obs": torch.randn(4, TINY_DIMS.obs_dim, generator=g),
            "critic_obs": torch.randn(4, TINY_DIMS.critic_obs_dim, generator=g),
            "actions": torch.rand(4, TINY_DIMS.act_dim, generator=g) * 2 - 1,
            "rewards": torch.randn(4, generator=g),
            "terminated": torch.rand(4, generator=g) < 0.05, "truncated": torch.rand(4, generator=g) < 0.05,
        })  # fmt: skip
    for _ in range(8):
        metrics = agent.update(4)
    assert all(bool(torch.isfinite(v)) for v in metrics.values())
    assert isinstance(agent.steps.critic, StepGraph) and agent.steps.critic.captured


@pytest.mark.gpu
def test_a_capture_waits_while_may_capture_says_no_and_the_calls_go_on_uncaptured() -> None:
    """may_capture False: calls past the warm-up run uncaptured (each a real step); True: it captures."""
    allowed = False
    weight = torch.ones(64, 64, device="cuda")

    def step(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        weight.add_(x.mean())
        return ((x @ weight).sum(),)

    graph = StepGraph(step, torch.device("cuda"), may_capture=lambda: allowed)
    for _ in range(6):
        graph(torch.ones(8, 64, device="cuda"))
    assert not graph.captured
    allowed = True
    for _ in range(2):  # a capture (and its replay), then a replay
        graph(torch.ones(8, 64, device="cuda"))
    assert graph.captured
    torch.testing.assert_close(weight, torch.full((64, 64), 9.0, device="cuda"))  # 8 steps of +1
