"""The evaluator's logic in one process: cadence, published weights and their stamp, the best checkpoint."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fastsac_async import AsyncConfigError, EvalSettings, Evaluator
from fastsac_async.evaluator.loop import PublishedWeights
from fastsac_async.run_layout import RunLayout
from fastsac_async.testing import FailingEnvFactory, FakeEnvFactory
from fastsac_async.transport import PUBLISHED_GSTEP, published_stamp, weight_extras
from fastsac_core import EnvCallError, FastSACConfig, InferencePolicy, evaluate_policy, peek_checkpoint
from shm_transport import HostWeightReader, HostWeightWriter, WeightChannel

CFG = FastSACConfig(actor_hidden_dim=16, critic_hidden_dim=16, num_atoms=11, compile=False, cudagraphs=False)
FACTORY = FakeEnvFactory()
DIMS = FACTORY(1, 0).dims


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _policy(scale: float) -> InferencePolicy:
    """A deterministic policy whose actor weights are all ``scale`` (0: the best action of the fake env)."""
    policy = InferencePolicy(DIMS, CFG, deterministic=True)
    with torch.no_grad():
        for p in policy.actor.parameters():
            p.fill_(scale)
    return policy


def _evaluator(policy: InferencePolicy, best: Path | None, clock: Clock, **settings: object) -> Evaluator:
    return Evaluator(
        settings=EvalSettings(**settings),  # type: ignore[arg-type]
        policy=policy, env_factory=FACTORY, dims=DIMS, agent=CFG, best_path=best, clock=clock,
    )  # fmt: skip


def test_an_evaluation_is_due_after_either_interval_counted_from_the_last_start() -> None:
    """Due after interval_s seconds or interval global steps since the last evaluation began, not before."""
    clock = Clock()
    ev = _evaluator(_policy(0.0), None, clock, interval_s=10.0, interval=5, episodes=1)
    assert not ev.due(4)
    assert ev.due(5), "five global steps since the start"
    ev.evaluate(gstep=5)
    clock.now = 9.9
    assert not ev.due(9)
    clock.now = 10.0
    assert ev.due(9), "ten seconds since the last evaluation began"
    by_time = _evaluator(_policy(0.0), None, clock, interval_s=None, interval=3, episodes=1)
    clock.now = 1e6
    assert not by_time.due(2), "seconds never make it due without interval_s"


def test_the_evaluation_is_trainer_evals_deterministic_return() -> None:
    """Evaluator.evaluate returns exactly evaluate_policy's mean return and length for the same settings."""
    policy = _policy(0.05)
    report = _evaluator(policy, None, Clock(), episodes=3, seed=4).evaluate(gstep=7, version=2)
    again = evaluate_policy(policy, FACTORY, 3, 4)
    assert report is not None and again is not None
    assert (report.mean_return, report.mean_length) == (again.mean_return, again.mean_length)
    assert (report.global_step, report.weight_version, report.episodes) == (7, 2, 3)


def test_a_stop_request_abandons_an_evaluation() -> None:
    """An evaluation asked to stop returns None and leaves the best return (and best.pt) untouched."""
    ev = _evaluator(_policy(0.0), None, Clock(), episodes=2)
    assert ev.evaluate(gstep=1, should_stop=lambda: True) is None
    assert ev.best_return == -math.inf


def test_an_evaluation_env_that_raises_is_one_line_naming_it_and_where() -> None:
    """The env's own exception during an evaluation leaves as EnvCallError: the env, the error, file:line."""
    ev = Evaluator(
        settings=EvalSettings(interval=1, episodes=1), policy=_policy(0.0),
        env_factory=FailingEnvFactory(fail_at_step=2), dims=DIMS, agent=CFG, best_path=None, clock=Clock(),
    )  # fmt: skip
    with pytest.raises(EnvCallError) as caught:
        ev.evaluate(gstep=1)
    line = str(caught.value)
    said = (
        r"_FailingEnv's step\(\) raised RuntimeError: env exploded at step 2 "
        r"\(raised at testing\.py:\d+ in step\)"
    )
    assert re.fullmatch(said, line), line
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_the_best_checkpoint_holds_the_weights_of_the_best_return_only(tmp_path: Path) -> None:
    """best.pt is written when a return beats every earlier one, never by a worse one, and reproduces it."""
    best = RunLayout(tmp_path).best_checkpoint
    good, bad = _policy(0.0), _policy(0.3)
    first = _evaluator(good, best, Clock(), episodes=2).evaluate(gstep=10)
    assert first is not None and first.best and best.is_file()
    saved = best.read_bytes()
    worse = _evaluator(bad, best, Clock(), episodes=2)
    assert worse.best_return == first.mean_return, "a resumed evaluator starts from the saved best"
    report = worse.evaluate(gstep=20)
    assert report is not None and not report.best and report.mean_return < first.mean_return
    assert best.read_bytes() == saved, "a worse evaluation leaves the better best in place"
    extra = peek_checkpoint(best)["extra"]
    assert (extra["iteration"], extra["eval_return"], extra["eval_episodes"]) == (10, first.mean_return, 2)
    reloaded = InferencePolicy(DIMS, CFG, deterministic=True)
    state = torch.load(best, weights_only=True)["agent"]
    reloaded.actor.load_state_dict(state["actor"])
    reloaded.normalizer.load_state_dict(state["obs_normalizer"])
    result = evaluate_policy(reloaded, FACTORY, 2, 0)
    assert result is not None and result.mean_return == first.mean_return


def test_published_weights_arrive_with_the_gstep_they_were_published_at() -> None:
    """The evaluator loads the writer's actor and normalizer, stamped with the publish gstep; never waits."""
    source = _policy(0.1)
    channel = WeightChannel.create(source.numel, weight_extras(DIMS))
    try:
        writer = HostWeightWriter(channel)
        target = _policy(0.0)
        weights = PublishedWeights(HostWeightReader(channel), target)
        assert not weights.refresh(), "nothing published yet: returns at once"
        flat = torch.nn.utils.parameters_to_vector(source.actor.parameters())
        extras = {**source.policy_extras(), PUBLISHED_GSTEP: published_stamp(42)}
        extras["obs_mean"] += 1.5
        writer.publish(flat, extras)
        assert weights.refresh() and (weights.version, weights.gstep) == (1, 42)
        assert torch.equal(torch.nn.utils.parameters_to_vector(target.actor.parameters()), flat)
        assert torch.equal(target.normalizer.mean, extras["obs_mean"])
        assert not weights.refresh(), "the same version is not loaded twice"
    finally:
        channel.unlink()
        channel.close()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"episodes": 0}, "eval_episodes=0 is invalid: use at least 1"),
        ({"interval_s": 0.0}, "eval_interval_s=0.0 is invalid: use a positive number of seconds"),
        ({"interval": -2}, "eval_interval=-2 is invalid: use a positive number of iterations"),
        ({"interval_s": None, "interval": None}, "eval_interval_s=None is invalid: set eval_interval_s or"),
        ({"video_every": -1}, "eval_video_every=-1 is invalid: use 0 .no clips. or a positive number"),
        ({"video_every": 2}, "eval_video_every=2 is invalid: give a ClipRecorder as video, or use 0"),
    ],
)
def test_bad_eval_settings_are_refused_naming_the_setting(settings: dict[str, object], message: str) -> None:
    """EvalSettings refuses each bad value with the setting, the value seen and the fix."""
    with pytest.raises(AsyncConfigError, match=message.replace("(", r"\(")):
        EvalSettings(**settings)  # type: ignore[arg-type]


class _Recorder:
    """A clip recorder that writes the policy's first weight and the seed as text (the renderer's stand-in).

    The real renderer (MuJoCo offscreen) is tested end to end in apps/trainer/tests/test_video.py.
    """

    def __init__(self, fail_at: int | None = None, suffix: str | None = None) -> None:
        self.calls = 0
        self.fail_at = fail_at
        self.suffix = suffix
        """Write a file of this suffix instead of ``out`` (as the app's writes a GIF without ffmpeg)."""
        self.stop_asked = False
        """Set when a clip starts: a ``should_stop`` that reads it asks the clip to stop."""

    def __call__(
        self, policy: InferencePolicy, seed: int, out: Path, should_stop: Callable[[], bool]
    ) -> Path | None:
        self.calls += 1
        self.stop_asked = True
        if self.calls == self.fail_at:
            raise RuntimeError("no OpenGL context")
        if should_stop():
            return None
        out = out if self.suffix is None else out.with_suffix(self.suffix)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f"{next(policy.actor.parameters()).flatten()[0].item()} {seed}")
        return out


def test_clips_are_of_the_first_and_every_kth_evaluation_and_a_failed_one_costs_it(tmp_path: Path) -> None:
    """video_every=2: evaluations 1, 3, 5 get clips of their weights; a failed or stopped clip is lost."""
    recorder = _Recorder(fail_at=2)
    ev = Evaluator(
        settings=EvalSettings(interval=1, episodes=1, seed=3, video_every=2, video=recorder),
        policy=_policy(0.25), env_factory=FACTORY, dims=DIMS, agent=CFG, best_path=None,
        clip_file=lambda gstep: tmp_path / f"clip_{gstep}.mp4",
    )  # fmt: skip
    reports = [ev.evaluate(gstep=g) for g in (10, 20, 30, 40, 50)]
    assert all(r is not None for r in reports)
    videos = [r.video for r in reports if r is not None]
    assert videos == [str(tmp_path / "clip_10.mp4"), None, None, None, str(tmp_path / "clip_50.mp4")]
    errors = [r.video_error for r in reports if r is not None]
    assert errors == [None, None, "RuntimeError: no OpenGL context", None, None], "the failed one says why"
    assert recorder.calls == 3, "evaluations 1, 3 (its recorder failed) and 5"
    assert (tmp_path / "clip_10.mp4").read_text() == "0.25 3", "the evaluated weights, the eval seed"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["clip_10.mp4", "clip_50.mp4"]
    stopping = _Recorder()
    stopped = Evaluator(
        settings=EvalSettings(interval=1, episodes=1, video_every=1, video=stopping),
        policy=_policy(0.0), env_factory=FACTORY, dims=DIMS, agent=CFG, best_path=None,
        clip_file=lambda gstep: tmp_path / "stopped" / f"{gstep}.mp4",
    )  # fmt: skip
    report = stopped.evaluate(gstep=1, should_stop=lambda: stopping.stop_asked)  # a stop during the clip
    assert report is not None and report.video is None and not (tmp_path / "stopped").exists()
    other = Evaluator(
        settings=EvalSettings(interval=1, episodes=1, video_every=1, video=_Recorder(suffix=".gif")),
        policy=_policy(0.0), env_factory=FACTORY, dims=DIMS, agent=CFG, best_path=None,
        clip_file=lambda gstep: tmp_path / "gif" / f"{gstep}.mp4",
    )  # fmt: skip
    report = other.evaluate(gstep=1)
    assert report is not None and report.video == str(tmp_path / "gif" / "1.gif"), "the file written is named"


def test_failed_clips_log_the_first_traceback_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Every failed clip's report says why in one line; the log holds the traceback of the first only."""

    class Failing(_Recorder):
        def __call__(self, *args: object, **kwargs: object) -> int | None:
            raise RuntimeError("EGL: no display\nsecond line")

    ev = Evaluator(
        settings=EvalSettings(interval=1, episodes=1, video_every=1, video=Failing()),
        policy=_policy(0.0), env_factory=FACTORY, dims=DIMS, agent=CFG, best_path=None,
        clip_file=lambda gstep: tmp_path / f"clip_{gstep}.mp4",
    )  # fmt: skip
    with caplog.at_level("DEBUG", logger="fastsac_async.evaluator.loop"):
        reports = [ev.evaluate(gstep=g) for g in (1, 2, 3)]
    assert [r.video_error for r in reports if r is not None] == ["RuntimeError: EGL: no display"] * 3
    failed = [r for r in caplog.records if "failed" in r.getMessage()]
    assert [(r.levelname, bool(r.exc_info)) for r in failed] == [
        ("WARNING", True), ("DEBUG", False), ("DEBUG", False)
    ]  # fmt: skip
