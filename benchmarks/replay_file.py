"""The replay file of a task's full buffer: its size, the snapshot, the write and the restore.

A buffer of the task's size (``task.num_envs`` x ``buffer_size`` transitions, the task's obs and
action widths) is filled with random steps on the chosen device, then timed: ``snapshot`` (the copy
the learner waits for: device to host), ``save_replay`` (what the writer thread does: serialise, write,
fsync, rename), ``load_replay`` into a buffer on the same device and into one on the CPU. The updates
per second of a tiny CPU agent are timed with and without a write running in the writer thread, to
show what the thread costs the caller (the GIL, memory bandwidth).

    uv run --frozen python benchmarks/replay_file.py [--task humanoid] [--device cuda] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from _harness import add_output_args, machine, report

from fastsac_async import RunLayout
from fastsac_core import ReplayBuffer, ReplaySaver, load_replay, save_replay
from fastsac_trainer.tasks import get_task, probe_dims


def _fill(buffer: ReplayBuffer, chunk: int = 256) -> None:
    n, cap, shapes = buffer.num_envs, buffer.capacity, {k: v.shape[2:] for k, v in buffer.storage.items()}
    for _ in range(0, cap, chunk):
        steps = {
            name: (torch.rand(chunk, n, *shape, device=buffer.device) < 0.01)
            if buffer.storage[name].dtype == torch.bool
            else torch.randn(chunk, n, *shape, device=buffer.device)
            for name, shape in shapes.items()
        }
        buffer.extend_batch(steps)


def _timed(fn: object) -> tuple[float, object]:
    assert callable(fn)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="humanoid")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dir", type=Path, default=None, help="folder of the file (default: a temp folder)")
    add_output_args(parser)
    args = parser.parse_args()
    print(machine())
    spec = get_task(args.task)
    dims = probe_dims(spec.env_factory())
    cfg = spec.agent_config()
    num_envs = spec.num_envs
    buffer = ReplayBuffer.of(dims, cfg, num_envs, device=args.device)
    _fill(buffer)
    transitions = buffer.num_stored
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        path = RunLayout(Path(folder)).replay(0)
        path.parent.mkdir(parents=True)
        snap_s, snapshot = _timed(buffer.snapshot)
        assert isinstance(snapshot, dict)
        write_s, _ = _timed(lambda: save_replay(path, snapshot, gstep=1))
        size = path.stat().st_size
        same = ReplayBuffer.of(dims, cfg, num_envs, device=args.device)
        load_same_s, _ = _timed(lambda: load_replay(path, same))
        cpu = ReplayBuffer.of(dims, cfg, num_envs, device="cpu")
        load_cpu_s, _ = _timed(lambda: load_replay(path, cpu))
        assert torch.equal(cpu.storage["obs"], buffer.storage["obs"].cpu())
        # What a write in the writer thread costs a caller that keeps computing (GIL, memory traffic).
        work = torch.randn(256, 256)

        def busy(seconds: float) -> float:
            done, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                work @ work
                done += 1
            return done / seconds

        alone = busy(2.0)
        saver = ReplaySaver(path, 0.0)
        saver.maybe_save(buffer, 2)
        during = busy(min(2.0, write_s))
        saver.wait()
    row = {
        "task": args.task,
        "device": args.device,
        "transitions": transitions,
        "bytes/transition": size / transitions,
        "file MB": size / 1e6,
        "snapshot s": snap_s,
        "write s": write_s,
        "write GB/s": size / write_s / 1e9,
        "load same-device s": load_same_s,
        "load to CPU s": load_cpu_s,
        "caller matmuls/s alone": alone,
        "during a write": during,
    }
    report(f"replay file of {args.task} ({num_envs} envs x {cfg.buffer_size})", [row], args.json)


if __name__ == "__main__":
    main()
