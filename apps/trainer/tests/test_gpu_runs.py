"""A user's CUDA paths end to end (run on the GPU machine): train, stop, resume, then eval and export.

Each run is the real CLI in a subprocess with the task's default settings on CUDA (compiled update,
CUDA graphs; an asynchronous run compiles in the background, the default, so these short runs train
with the interim steps while the compile warmer works; the resume test's asynchronous run compiles
first, so that path keeps a run of its own); eval and export then read the CUDA-trained checkpoint in
a process that sees no GPU.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from fastsac_async.run_layout import RunLayout
from fastsac_core import peek_checkpoint, peek_replay
from fastsac_trainer.video import mp4_unavailable

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

APP_DIR = Path(__file__).resolve().parents[1]
TINY = [
    "task=pendulum",
    "task.num_envs=4",
    "algo.trainer.logging_interval=2",
    "algo.trainer.save_interval=2",
    "algo.agent.learning_starts=2",
    "algo.agent.batch_size=32",
    "algo.agent.num_updates=2",
    "algo.trainer.device=cuda",
    "console=plain",
    "runs_root=runs",
]


def _run(args: list[str], cwd: Path, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, str(APP_DIR), *args], cwd=cwd, env=dict(os.environ, **env),
        capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "Traceback" not in out, out
    return out


def _iteration(run_dir: Path) -> int:
    last = max(RunLayout(run_dir).checkpoints.glob("model_*.pt"))
    return int(peek_checkpoint(last)["extra"]["iteration"])


def test_a_run_compiling_in_the_background_ends_before_its_switch_and_its_resume_switches(
    tmp_path: Path,
) -> None:
    """Compile in the background on CUDA: a short run exits cleanly mid-compile; its resume switches."""
    background = ["algo.trainer.asynchronous=true", "algo.trainer.async_options.num_collectors=2",
                  "algo.trainer.async_options.transition_ipc=on",
                  "algo.agent.compile_in_background=true"]  # fmt: skip
    _run([*TINY, *background, "algo.trainer.num_learning_iterations=4", "run_name=b"], tmp_path)
    run_dir = tmp_path / "runs" / "b"
    bg_failed = "in the background failed"  # the agent's warning
    learner_log = RunLayout(run_dir).log("learner0")
    first = learner_log.read_text()
    assert _iteration(run_dir) == 4 and "Traceback" not in first and bg_failed not in first, first
    assert "switched at update" not in first, "4 iterations end while the steps still compile"
    # Its compile warmer (Note [compile warmer]) was killed with the learner, not left behind.
    warmers = re.findall(r"compile warmer started \(pid (\d+)\)", first)
    assert len(warmers) == 1 and not psutil.pid_exists(int(warmers[0])), first
    # Long enough for the compile (the 14-collector Humanoid run's took 65 s), then the time limit.
    resumed = _run([f"resume={run_dir}", "algo.trainer.num_learning_iterations=100000000",
                    "algo.trainer.save_interval=100000", "algo.trainer.time_limit_s=120", "console=plain"],
                   tmp_path)  # fmt: skip
    log = learner_log.read_text()
    assert "switched at update" in log and "Traceback" not in log and bg_failed not in log, log
    assert "compile warmer done after" in log and "building from the cache" in log, log
    from_cache = r"compiled update ready after [\d.]+ s \(\d+ graph\(s\) from the compile cache, 0 compiled\)"
    assert re.search(from_cache, log), log
    assert "compiled switch" in resumed and _iteration(run_dir) > 4, resumed


def test_the_default_async_path_on_cuda_has_its_collectors_infer_on_their_cpus(tmp_path: Path) -> None:
    """Under 'auto' a CUDA learner's small policy runs on its collectors' CPUs (host rings); it trains."""
    out = _run([*TINY, "algo.trainer.asynchronous=true", "algo.trainer.async_options.num_collectors=2",
                "algo.trainer.num_learning_iterations=6", "run_name=d"], tmp_path)  # fmt: skip
    rows = re.findall(r"^(\d+) +\d+-\d+ +0 +(\S+) +\S+ +\S+ +(\S+) +(\S+)$", out, re.MULTILINE)
    assert rows == [("0", "cpu", "host", "host"), ("1", "cpu", "host", "host")], out
    assert "collector_inference_device='auto': the collectors infer on their CPUs (2 envs each" in out, out
    assert re.search(r"^0 +cuda:0 ", out, re.MULTILINE), out  # the learner's row: it learns on the GPU
    run_dir = tmp_path / "runs" / "d"
    for name in ("collector0", "collector1"):
        log = RunLayout(run_dir).log(name).read_text()
        assert "policy on cpu built and warmed up" in log and "Traceback" not in log, log
    assert _iteration(run_dir) == 6


@pytest.mark.parametrize(
    "mode",
    [
        ["algo.trainer.asynchronous=true", "algo.trainer.async_options.num_collectors=2",
         "algo.trainer.async_options.transition_ipc=on", "algo.trainer.async_options.weight_ipc=on",
         "algo.trainer.async_options.weight_ipc_min_bytes=0", "algo.agent.compile_in_background=false"],
        ["algo.trainer.asynchronous=false"],
    ],
    ids=["async_cuda_ipc", "sync"],
)  # fmt: skip
def test_a_cuda_run_resumes_and_its_checkpoint_evaluates_and_exports_without_a_gpu(
    tmp_path: Path, mode: list[str]
) -> None:
    """CUDA run to 6 iterations, resume to 10 (counter continues), then eval and ONNX export on CPU only.

    The run evaluates every 2 iterations (async: the evaluator reads the CUDA-IPC weight channel), and
    its best.pt evaluates on CPU to the return it was kept for. The replay buffer comes back on each
    resume: into the CUDA learner's buffer, then (a branch into a new folder) into a CPU one in a
    process that sees no GPU.
    """
    evaluating = [
        "algo.trainer.eval_interval=2",
        "algo.trainer.eval_interval_s=null",
        "algo.trainer.eval_episodes=2",
    ]
    _run([*TINY, *mode, *evaluating, "algo.trainer.num_learning_iterations=6", "run_name=r"], tmp_path)
    run_dir = tmp_path / "runs" / "r"
    assert _iteration(run_dir) == 6
    if "algo.trainer.asynchronous=true" in mode:
        log = RunLayout(run_dir).log("learner0").read_text()
        assert "host transition ring instead of CUDA IPC" not in log, "the rings were CUDA-IPC rings"
    saved = peek_replay(RunLayout(run_dir).replay(0))
    assert saved.gstep == 6 and saved.transitions > 0
    out = _run([f"resume={run_dir}", "algo.trainer.num_learning_iterations=10", "console=plain"], tmp_path)
    assert f"(iteration 6); replay buffer of {saved.transitions:,} transitions from iteration 6," in out, out
    assert _iteration(run_dir) == 10
    restored = f"replay buffer restored from {RunLayout(run_dir).replay(0)}: {saved.transitions} transitions"
    asynchronous = "algo.trainer.asynchronous=true" in mode
    log = RunLayout(run_dir).log("learner0" if asynchronous else "trainer").read_text()
    assert restored in log, log
    no_gpu = {"CUDA_VISIBLE_DEVICES": ""}
    at_10 = peek_replay(RunLayout(run_dir).replay(0))
    on_cpu = ["algo.trainer.device=cpu", "algo.trainer.async_options.transition_ipc=off",
              "algo.trainer.async_options.weight_ipc=off"]  # fmt: skip
    branch = [f"resume={run_dir}", "run_name=r_cpu", "algo.trainer.num_learning_iterations=12", *on_cpu]
    out = _run(branch, tmp_path, **no_gpu)
    assert f"(iteration 10); replay buffer of {at_10.transitions:,} transitions from iteration 10," in out
    cpu_dir = tmp_path / "runs" / "r_cpu"
    log = RunLayout(cpu_dir).log("learner0" if asynchronous else "trainer").read_text()
    from_cuda = f"replay buffer restored from {RunLayout(run_dir).replay(0)}: {at_10.transitions} transitions"
    assert from_cuda in log, log
    assert _iteration(cpu_dir) == 12
    evaluated = _run(["eval", f"checkpoint={run_dir}", "episodes=2"], tmp_path, **no_gpu)
    assert "mean return" in evaluated, evaluated
    onnx = tmp_path / "policy.onnx"
    _run(["export", f"checkpoint={run_dir}", "format=onnx", f"out={onnx}"], tmp_path, **no_gpu)
    assert onnx.stat().st_size > 0
    best = RunLayout(run_dir).best_checkpoint
    kept_for = float(peek_checkpoint(best)["extra"]["eval_return"])
    printed = _run(["eval", f"checkpoint={best}", "episodes=2"], tmp_path, **no_gpu)
    assert f"mean return {kept_for:.2f}" in printed, printed


def test_a_cuda_run_records_clips_of_its_evaluations_with_egl(tmp_path: Path) -> None:
    """On the GPU host, clips of a CUDA run's evaluations (async, CUDA-IPC weights) render with EGL."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    clips = ["task=halfcheetah", "task.max_episode_steps=20", "algo.trainer.asynchronous=true",
             "algo.trainer.async_options.num_collectors=2", "algo.trainer.async_options.weight_ipc=on",
             "algo.trainer.async_options.weight_ipc_min_bytes=0", "algo.trainer.eval_interval_s=null",
             "algo.trainer.eval_interval=100", "algo.trainer.eval_episodes=1",
             "algo.trainer.eval_video_every=1", "algo.trainer.eval_video_steps=10"]  # fmt: skip
    tiny = [a for a in TINY if not a.startswith("task=")]
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    budget = ["algo.trainer.num_learning_iterations=2000", "run_name=v"]
    done = subprocess.run(
        [sys.executable, str(APP_DIR), *tiny, *clips, *budget],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in out, out
    assert "rendered with MUJOCO_GL=egl" in out, "EGL is the GPU host's backend"
    run_dir = tmp_path / "runs" / "v"
    # The GIF needs Pillow alone; the MP4 beside it imageio-ffmpeg, which the GPU host may lack.
    gifs = sorted(RunLayout(run_dir).videos.glob("eval_*.gif"))
    assert gifs and all(g.stat().st_size > 0 for g in gifs), out
    mp4s = sorted(RunLayout(run_dir).videos.glob("eval_*.mp4"))
    assert [m.with_suffix(".gif") for m in mp4s] == (gifs if mp4_unavailable() is None else []), out
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0})
    events.Reload()
    assert len(events.Images("eval/video")) == len(gifs)


def test_sigterm_stops_a_cuda_ipc_run_with_a_checkpoint_that_resumes(tmp_path: Path) -> None:
    """SIGTERM mid-run on CUDA with CUDA-IPC rings: exit 0, a final checkpoint that resumes, nothing left."""
    import re
    import signal
    import time

    async_ipc = ["algo.trainer.asynchronous=true", "algo.trainer.async_options.num_collectors=2",
                 "algo.trainer.async_options.transition_ipc=on"]  # fmt: skip
    args = [*TINY, *async_ipc, "algo.trainer.num_learning_iterations=1000000", "run_name=t"]
    proc = subprocess.Popen([sys.executable, str(APP_DIR), *args], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    run_dir = tmp_path / "runs" / "t"
    try:
        deadline = time.monotonic() + 300
        learner_log = RunLayout(run_dir).log("learner0")
        # Past the first update chunk (the interim steps', the compile warmer busy beside them: the
        # default background compile) and a checkpoint after it.
        while (
            not (learner_log.exists() and "first update chunk" in learner_log.read_text())
            or len(list(RunLayout(run_dir).checkpoints.glob("model_*.pt"))) < 2
        ):
            assert proc.poll() is None and time.monotonic() < deadline, "the run trains and saves"
            time.sleep(0.5)
        pids = [int(m.group(1)) for log in RunLayout(run_dir).logs.glob("*[0-9].log")
                if (m := re.search(r"started \(pid (\d+)", log.read_text()))]  # fmt: skip
        # The compile warmer, the learner's own child, must go with it.
        pids += [int(p) for p in re.findall(r"compile warmer started \(pid (\d+)", learner_log.read_text())]
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        stopped = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 0, out
    assert "stop_reason=SIGTERM" in out, out
    assert stopped < 30.0
    time.sleep(1.0)
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()], "every worker and the warmer are gone"
    assert "leaked" not in out, out
    reached = _iteration(run_dir)
    resumed = _run([f"resume={run_dir}", f"algo.trainer.num_learning_iterations={reached + 4}",
                    "console=plain"], tmp_path)  # fmt: skip
    assert "resuming from" in resumed and _iteration(run_dir) == reached + 4


@pytest.mark.parametrize(
    "env",
    [
        ["task=gym", "task.env_id=InvertedPendulum-v5", "task.num_envs=4"],
        [
            "task=gym",
            "task.env_factory=point_env:make",
            "task.env_kwargs={episode_steps:10}",
            "task.num_envs=4",
        ],
    ],
    ids=["gym_id", "own_factory"],
)
@pytest.mark.parametrize(
    "mode",
    [["algo.trainer.asynchronous=true", "algo.trainer.async_options.num_collectors=2",
      "algo.trainer.async_options.transition_ipc=on"], ["algo.trainer.asynchronous=false"]],
    ids=["async_cuda_ipc", "sync"],
)  # fmt: skip
def test_a_users_env_trains_on_cuda_resumes_and_evaluates_without_a_gpu(
    tmp_path: Path, point_env_dir: Path, env: list[str], mode: list[str]
) -> None:
    """task=gym (an id, or the user's factory outside the workspace) on CUDA: run, resume, eval on CPU."""
    user = {"PYTHONPATH": str(point_env_dir)}
    tiny = [a for a in TINY if not a.startswith("task")]
    _run([*tiny, *env, *mode, "algo.trainer.num_learning_iterations=4", "run_name=r"], tmp_path, **user)
    run_dir = tmp_path / "runs" / "r"
    assert _iteration(run_dir) == 4
    _run([f"resume={run_dir}", "algo.trainer.num_learning_iterations=6", "console=plain"], tmp_path, **user)
    assert _iteration(run_dir) == 6
    no_gpu = {"CUDA_VISIBLE_DEVICES": "", **user}
    evaluated = _run(["eval", f"checkpoint={run_dir}", "episodes=2"], tmp_path, **no_gpu)
    assert "mean return" in evaluated, evaluated
