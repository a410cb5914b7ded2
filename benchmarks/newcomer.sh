#!/usr/bin/env bash
# For the 16-core 1-GPU H200 host (nvidia-h200): the newcomer's first command (no options: collectors
# sized to the machine) and the headline flags (14 collectors x 1 CPU), one after the other, Humanoid-v5,
# TIME_LIMIT s of training each (default 150), then each run's return, env steps/s and updates/s against
# wall-clock from launch, and the deterministic eval of its final checkpoint (10 episodes).
# On the device machine: source .devrun/env.sh && bash benchmarks/newcomer.sh   (figures: wiki/benchmarks.md)
# The headline figure alone: RUNS=headline TIME_LIMIT=300 bash benchmarks/newcomer.sh
# Each run's final checkpoint is also rendered (MUJOCO_GL chosen by the trainer: EGL on the GPU host) into
# $OUT/<run>.gif, 300 steps (Pillow only; carry it with `device-prep.sh pillow`); GIF=0 leaves that out.
set -u
OUT=${OUT:-/tmp/newcomer}; mkdir -p "$OUT"
root=$PWD; cd /tmp
limit=${TIME_LIMIT:-150}
common="algo.trainer.time_limit_s=$limit console=plain runs_root=/tmp/runs"
declare -A extra=(
  [newcomer]=""
  [headline]="algo.trainer.async_options.num_collectors=14 algo.trainer.async_options.cpus_per_collector=1"
)
nproc; nvidia-smi --query-gpu=name --format=csv,noheader
for run in ${RUNS:-newcomer headline}; do
  rm -rf "/tmp/runs/$run"
  start=$(date +%s.%N)
  timeout $((limit + 120)) python3 "$root/apps/trainer" $common run_name=$run ${extra[$run]} > "$OUT/${run}_console.log" 2>&1
  echo "=== $run (rc=$?): ${extra[$run]:-no options}"
  head -n 1 "$OUT/${run}_console.log"
  python3 "$root/benchmarks/return_curve.py" "/tmp/runs/$run" --start-epoch "$start" --every 30 | tee "$OUT/${run}_curve.txt"
  tail -n 2 "$OUT/${run}_console.log"
  timeout 300 python3 "$root/apps/trainer" eval checkpoint="/tmp/runs/$run" episodes=10 2>&1 | tail -n 3
  if [[ ${GIF:-1} == 1 ]]; then
    timeout 300 python3 "$root/apps/trainer" eval checkpoint="/tmp/runs/$run" episodes=1 video=true \
      video_steps=300 video_out="$OUT/$run.gif" 2>&1 | tail -n 2
  fi
done
