#!/usr/bin/env bash
# The newcomer's first command (no options: collectors sized to the machine) against the headline flags
# (14 collectors x 1 CPU), one after the other on the same 1-GPU host, Humanoid-v5, TIME_LIMIT s of
# training each (default 150), then each run's return and env steps/s against wall-clock from launch.
# On the device machine: source .devrun/env.sh && bash benchmarks/newcomer.sh   (figures: wiki/benchmarks.md)
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
for run in newcomer headline; do
  rm -rf "/tmp/runs/$run"
  start=$(date +%s.%N)
  timeout $((limit + 120)) python3 "$root/apps/trainer" $common run_name=$run ${extra[$run]} > "$OUT/${run}_console.log" 2>&1
  echo "=== $run (rc=$?): ${extra[$run]:-no options}"
  head -n 1 "$OUT/${run}_console.log"
  python3 "$root/benchmarks/return_curve.py" "/tmp/runs/$run" --start-epoch "$start" --every 30 | tee "$OUT/${run}_curve.txt"
  tail -n 2 "$OUT/${run}_console.log"
done
