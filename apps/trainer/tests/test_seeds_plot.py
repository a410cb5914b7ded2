"""Several seeds in one command, and `trainer plot` drawing them (and single runs) from their event files."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
from matplotlib.collections import PolyCollection
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fastsac_trainer.config.exceptions import TrainerAppError
from fastsac_trainer.plot import curves, draw_runs, plot_main, plot_runs
from fastsac_trainer.reporting import EvalPoint, Snapshot
from fastsac_trainer.seeds import seed_group, seed_runs
from fastsac_trainer.tensorboard import TensorBoardReporter

APP_DIR = Path(__file__).resolve().parents[1]
RETURN = "rollout/mean_return"


def test_a_seed_list_becomes_one_run_per_seed_in_sibling_folders() -> None:
    """``seed=1,2`` gives one command per seed with run_name=<name>_s<seed>; one seed is unchanged."""
    assert seed_runs(["task=ant", "seed=3"]) == [["task=ant", "seed=3"]]
    assert seed_runs(["run_name=x", "task=ant", "seed=1,2"]) == [
        ["task=ant", "seed=1", "run_name=x_s1"],
        ["task=ant", "seed=2", "run_name=x_s2"],
    ]
    unnamed = seed_runs(["task=ant", "seed=[4,5]"])
    assert [run[-1].rpartition("_")[2] for run in unnamed] == ["s4", "s5"]
    assert unnamed[0][-1].startswith("run_name=ant-") and seed_group(unnamed[0][-1][9:], {"seed": 4})
    assert seed_group("x_s1", {"seed": 1}) == "x" and seed_group("x_s1", {"seed": 2}) is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["seed=1,x"], r"seed='1,x' is invalid: seeds are non-negative integers"),
        (["seed=1,1"], r"seed='1,1' is invalid: a seed is listed twice"),
        (["seed=1,2", "resume=runs/r"], r"seed=1,2 is invalid with resume="),
    ],
)
def test_a_bad_seed_list_is_refused_in_one_line(overrides: list[str], message: str) -> None:
    """A seed that is not an integer, a repeated seed, or a resume of several seeds is refused."""
    with pytest.raises(TrainerAppError, match=message):
        seed_runs(overrides)


def _write_run(run_dir: Path, steps: list[int], values: list[float], *, evals: bool = False) -> None:
    """Events of ``RETURN`` at ``steps``; with ``evals``, an ``eval/return`` of the same value at each."""
    writer = TensorBoardReporter(run_dir)
    for i, (step, value) in enumerate(zip(steps, values, strict=True)):
        writer.report(Snapshot(iteration=i, env_steps=step, total_env_steps=steps[-1], elapsed_s=float(i),
                               scalars={RETURN: value}))  # fmt: skip
        if evals:
            writer.evaluated(EvalPoint(iteration=i, env_steps=step, mean_return=value, mean_length=1.0,
                                       best_return=value, seconds=0.0))  # fmt: skip
    writer.close()


def test_plot_overlays_runs_with_their_event_values(tmp_path: Path) -> None:
    """Two runs give two labelled curves holding exactly their events' steps and values; the PNG decodes."""
    _write_run(tmp_path / "a", [8, 16, 24], [1.0, 2.0, 4.0])
    _write_run(tmp_path / "b", [32, 64], [5.0, 3.0])
    drawn = curves([tmp_path / "a", tmp_path / "b"], RETURN, "env_steps")
    assert [c.label for c in drawn] == ["a", "b"]
    assert drawn[0].x.tolist() == [8, 16, 24] and drawn[0].mean.tolist() == [1.0, 2.0, 4.0]
    assert drawn[1].x.tolist() == [32, 64] and not drawn[1].std.any()
    wall = curves([tmp_path / "a"], RETURN, "wall_s")[0].x
    assert wall[0] >= 0.0 and np.all(np.diff(wall) >= 0), "no config event: from the first event"
    assert curves([tmp_path / "a"], "eval/return", "env_steps") == []
    image = iio.imread(plot_runs([tmp_path / "a", tmp_path / "b"], tmp_path / "p.png"))
    assert image.shape[:2] == (400, 1200), "one row (no eval/return), two axes"
    assert image.std() > 0
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainerAppError, match="has no rollout/mean_return yet"):
        plot_runs([tmp_path / "empty"], tmp_path / "q.png")


def test_plot_without_out_writes_into_the_first_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without out=, the image goes into the first run folder (not the current one); the line says where."""
    _write_run(tmp_path / "a", [8, 16], [1.0, 2.0])
    _write_run(tmp_path / "b", [8, 16], [3.0, 4.0])
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert plot_main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    image = tmp_path / "a" / "returns.png"
    assert iio.imread(image).std() > 0 and list(elsewhere.iterdir()) == []
    assert capsys.readouterr().out == f"wrote {image} (2 run(s))\n"


def test_every_row_counts_wall_clock_seconds_from_the_launch_its_config_events_carry(tmp_path: Path) -> None:
    """Both rows' wall-clock x is the event's time minus the launch (the config's), not minus their first."""
    launched = time.time() - 30.0
    writer = TensorBoardReporter(tmp_path / "r", config={"task": {"name": "x"}}, launched=launched)
    for i, step in enumerate((8, 16)):
        writer.report(Snapshot(iteration=i, env_steps=step, total_env_steps=16, elapsed_s=float(i),
                               scalars={RETURN: 1.0}))  # fmt: skip
        writer.evaluated(EvalPoint(iteration=i, env_steps=step, mean_return=2.0, mean_length=1.0,
                                   best_return=2.0, seconds=0.0))  # fmt: skip
    writer.close()
    events = EventAccumulator(str(tmp_path / "r"))
    events.Reload()
    for tag in (RETURN, "eval/return"):
        wall = np.array([p.wall_time for p in events.Scalars(tag)])
        (curve,) = curves([tmp_path / "r"], tag, "wall_s")
        assert curve.x == pytest.approx(wall - launched), tag
        assert curve.x[0] >= 30.0, tag


def _linear_seeds(root: Path, name: str, spans: dict[int, tuple[int, int]]) -> list[Path]:
    """Seed runs ``<name>_s<seed>``: a point every 8 env steps over ``spans[seed]``, valued seed * x / 8."""
    runs = []
    for seed, (first, last) in spans.items():
        steps = list(range(first, last + 1, 8))
        _write_run(root / f"{name}_s{seed}", steps, [seed * step / 8 for step in steps])
        runs.append(root / f"{name}_s{seed}")
    return runs


def test_seeds_that_overlap_in_part_average_only_where_two_or_more_have_points(tmp_path: Path) -> None:
    """s2 stops early, s3 starts late: each part is the mean of its seeds there, s3's tail its own line."""
    runs = _linear_seeds(tmp_path, "g", {1: (8, 80), 2: (8, 40), 3: (24, 120)})
    drawn = curves(runs, RETURN, "env_steps")
    parts = [(c.label, c.seeds, c.x[0], c.x[-1]) for c in drawn]
    assert parts == [
        ("g (mean of 2 seeds)", 2, 8, 24),
        ("g (mean of 3 seeds)", 3, 24, 40),
        ("g (mean of 2 seeds)", 2, 40, 80),
        ("g: g_s3 alone", 1, 80, 120),
    ]
    # Seed k's values are k * x / 8 wherever it has points: the mean and spread of the seeds present.
    for curve, seeds in zip(drawn[:3], ((1, 2), (1, 2, 3), (1, 3)), strict=True):
        at_x = np.array([[k * x / 8 for x in curve.x] for k in seeds])
        assert curve.mean == pytest.approx(at_x.mean(axis=0)) and curve.std == pytest.approx(at_x.std(axis=0))
    alone = drawn[3]
    assert alone.x.tolist() == list(range(80, 121, 8)) and alone.mean.tolist() == [3 * x / 8 for x in alone.x]
    assert not alone.std.any()


def test_seeds_that_do_not_overlap_are_drawn_as_their_own_lines_with_no_mean(tmp_path: Path) -> None:
    """Two seeds with disjoint env-step ranges: two single-seed lines, nothing in the gap between them."""
    runs = _linear_seeds(tmp_path, "h", {1: (8, 40), 2: (64, 96)})
    drawn = curves(runs, RETURN, "env_steps")
    assert [(c.label, c.seeds, c.x.tolist()) for c in drawn] == [
        ("h: h_s1 alone", 1, [8, 16, 24, 32, 40]),
        ("h: h_s2 alone", 1, [64, 72, 80, 88, 96]),
    ]
    assert drawn[1].mean.tolist() == [2 * x / 8 for x in drawn[1].x]
    lines = draw_runs(runs).axes[1].get_lines()
    assert [line.get_linestyle() for line in lines] == [":", ":"], "dotted: each seed alone"


def test_the_figure_draws_each_part_with_its_band_and_a_legend_of_seed_counts(tmp_path: Path) -> None:
    """Read back from the figure: the parts' lines and bands, one legend entry per seed count, a plain run."""
    runs = _linear_seeds(tmp_path, "g", {1: (8, 80), 2: (8, 40), 3: (24, 120)})
    _write_run(tmp_path / "solo", [8, 16], [1.0, 2.0])
    figure = draw_runs([*runs, tmp_path / "solo"])
    ax = figure.axes[1]  # rollout/mean_return against env steps
    assert ax.get_xlabel() == "env steps"
    drawn = curves([*runs, tmp_path / "solo"], RETURN, "env_steps")
    lines = ax.get_lines()
    assert [(line.get_xdata().tolist(), line.get_ydata().tolist()) for line in lines] == [
        (c.x.tolist(), c.mean.tolist()) for c in drawn
    ]
    assert [line.get_linestyle() for line in lines] == ["--", "-", "--", ":", "-"]
    assert len({line.get_color() for line in lines}) == 2, "one colour per seed group or run"
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 3, "a band for each mean, none for a seed alone or a run"
    for band, curve in zip(bands, drawn[:3], strict=True):
        y = band.get_paths()[0].vertices[:, 1]
        assert y.min() == pytest.approx((curve.mean - curve.std).min())
        assert y.max() == pytest.approx((curve.mean + curve.std).max())
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["g (mean of 2 seeds)", "g (mean of 3 seeds)", "g: g_s3 alone", "solo"]


def test_a_row_counts_only_the_seeds_that_have_its_scalar(tmp_path: Path) -> None:
    """Seeds without eval/return: the eval row's styles and legend count only the seeds that have it."""
    steps = [8, 16, 24]
    for run, evals in (("g_s1", True), ("g_s2", True), ("g_s3", False), ("h_s1", True), ("h_s2", False)):
        _write_run(tmp_path / run, steps, [1.0, 2.0, 3.0], evals=evals)
    runs = sorted(tmp_path.iterdir())
    figure = draw_runs(runs)
    rollout, evaluation = figure.axes[1], figure.axes[3]  # against env steps
    assert (rollout.get_ylabel(), evaluation.get_ylabel()) == (RETURN, "eval/return")
    for ax, legend in ((rollout, ["g (mean of 3 seeds)", "h (mean of 2 seeds)"]),
                       (evaluation, ["g (mean of 2 seeds)", "h_s1"])):  # fmt: skip
        assert [line.get_linestyle() for line in ax.get_lines()] == ["-", "-"], "solid: all seeds with it"
        assert [text.get_text() for text in ax.get_legend().get_texts()] == legend


def _events(run_dir: Path) -> tuple[list[int], list[float]]:
    events = EventAccumulator(str(run_dir))
    events.Reload()
    points = events.Scalars(RETURN)
    return [p.step for p in points], [p.value for p in points]


@pytest.mark.slow
def test_seed_list_trains_sibling_runs_then_plot_shows_their_mean_and_spread(tmp_path: Path) -> None:
    """``trainer seed=1,2`` on CPU makes two runs; ``trainer plot`` over them draws their mean and std."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    tiny = ["task=pendulum", "task.num_envs=2", "algo.trainer.asynchronous=false",
            "algo.trainer.time_limit_s=2", "algo.trainer.num_learning_iterations=100000",
            "algo.trainer.logging_interval=2", "algo.agent.learning_starts=2", "algo.agent.batch_size=32",
            "algo.agent.num_updates=1", "algo.trainer.eval_interval_s=null", "algo.trainer.eval_interval=40",
            "algo.trainer.eval_episodes=1"]  # fmt: skip
    command = [sys.executable, str(APP_DIR), *tiny, "seed=1,2", "run_name=p", "console=plain"]
    started = time.time()
    run = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "seed 1/2: seed=1 -> p_s1" in run.stdout and "seed 2/2: seed=2 -> p_s2" in run.stdout
    runs = [tmp_path / "runs" / "p_s1", tmp_path / "runs" / "p_s2"]
    assert all((r / "checkpoints").is_dir() for r in runs)
    assert "seed: 2" in (runs[1] / "config.yaml").read_text()
    plot_command = [sys.executable, str(APP_DIR), "plot", *map(str, runs), "out=p.png"]
    plot = subprocess.run(
        plot_command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert plot.returncode == 0, plot.stdout + plot.stderr
    assert iio.imread(tmp_path / "p.png").shape[:2] == (800, 1200), "two rows: training and eval returns"
    _assert_seconds_since_launch(runs, started)
    (s1, v1), (s2, v2) = _events(runs[0]), _events(runs[1])
    drawn = curves(runs, RETURN, "env_steps")
    (curve,) = [c for c in drawn if c.seeds == 2]
    assert curve.label == "p (mean of 2 seeds)"
    # The mean spans the env steps both seeds reached; at its end it is the seeds' mean and std there
    # (a seed without a point at that step: linear between its neighbours). Past it, the seed that
    # went on (time_limit_s: they need not stop at the same step) is drawn alone.
    assert curve.x[0] == max(s1[0], s2[0]) and curve.x[-1] == min(s1[-1], s2[-1])
    last = [np.interp(curve.x[-1], s1, v1), np.interp(curve.x[-1], s2, v2)]
    assert curve.mean[-1] == pytest.approx(np.mean(last)) and curve.std[-1] == pytest.approx(np.std(last))
    assert [c.seeds for c in drawn] in ([2], [2, 1], [1, 2], [1, 2, 1])
    assert max(c.x[-1] for c in drawn) == max(s1[-1], s2[-1])


def _assert_seconds_since_launch(runs: list[Path], started: float) -> None:
    """Each run's rows, training and eval, count wall-clock seconds from that run's launch.

    Seed 1's launch is the command's start (after ``started``; the kernel dates a process in whole seconds
    of boot time, hence the second of slack); seed 2's is its own start, after seed 1's last event. Both
    rows share it, and the first evaluation lies after it: an eval row counted from the first evaluation
    would start at 0.
    """
    after = started - 1.0
    for run in runs:
        events = EventAccumulator(str(run))
        events.Reload()
        zeros = []
        for tag in (RETURN, "eval/return"):
            wall = np.array([p.wall_time for p in events.Scalars(tag)])
            (curve,) = curves([run], tag, "wall_s")
            assert curve.x[0] > 0, (run.name, tag, curve.x[:3])
            zeros.append(wall - curve.x)
        zero = zeros[0][0]
        assert np.allclose(np.concatenate(zeros), zero, rtol=0, atol=1e-3), "one zero for both rows"
        first = min(p.wall_time for tag in (RETURN, "eval/return") for p in events.Scalars(tag))
        assert after <= zero < first, (run.name, after, zero, first)
        after = max(p.wall_time for p in events.Scalars(RETURN))


def test_a_seed_list_under_torchrun_on_several_hosts_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hosts agree on one run per launch: a seed list across 2 torchrun hosts is one line, not a reuse."""
    for key, value in {
        "TORCHELASTIC_RUN_ID": "job7",
        "GROUP_RANK": "0",
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29400",
    }.items():
        monkeypatch.setenv(key, value)  # fmt: skip
    with pytest.raises(TrainerAppError, match=r"seed=1,2 is invalid under torchrun with 2 hosts"):
        seed_runs(["seed=1,2"])


def test_an_out_that_is_a_folder_gets_the_default_name_inside_it(tmp_path: Path) -> None:
    """out=<existing folder> is <folder>/returns.png, not <folder>.png beside it; no suffix means .png."""
    from fastsac_trainer.plot import DEFAULT_OUT, image_file

    assert image_file(str(tmp_path)) == tmp_path / DEFAULT_OUT
    assert image_file(str(tmp_path / "curves")) == tmp_path / "curves.png"
