#!/usr/bin/env bash
# Issue 27, item 4: is the strict-mode asynchronous trainer's curve inside the synchronous trainer's
# run-to-run band? Walker2d's defaults, 3 seeds of each up to 1 M env steps (3,907 iterations of 256
# envs), all six at once on the 1-GPU H200 host (nvidia-h200): each async run on 4 CPUs (the trainer
# sizes its collectors), each sync run on 1 CPU, the one GPU shared. A short sync run (8 CPUs) and a
# short async run (4 CPUs: the same collector layout as the six) fill the compile cache first, so the
# six load their graphs instead of compiling them six times at once. Every 390 iterations (~100 k env
# steps) a deterministic evaluation (10 episodes); then `trainer plot` of the six runs (seeds of one
# name drawn as mean and spread) and `trainer eval` of each final checkpoint.
# On the device machine: source .devrun/env.sh && bash benchmarks/async_vs_sync.sh
# Everything lands in $OUT (default /tmp/async_vs_sync): the plot, the console logs, each run's
# TensorBoard events and logs in one runs.tgz (checkpoints left out). The whole script ends within
# BUDGET seconds (default 570, for a 600 s device call): each phase's limit comes from what is left,
# the six runs' training limit too (their curves then stop short of 1 M steps: see their `done` lines).
# ITERATIONS lowers the step budget.
set -u
OUT=${OUT:-/tmp/async_vs_sync}; mkdir -p "$OUT"
root=$PWD
runs=/tmp/avs_runs; rm -rf "$runs"; mkdir -p "$runs"
iterations=${ITERATIONS:-3907}
start=$(date +%s); deadline=$(( start + ${BUDGET:-570} ))
left() { echo $(( deadline - $(date +%s) )); }
trainer=(python3 "$root/apps/trainer")
common=(task=walker2d console=plain "runs_root=$runs" algo.trainer.eval_interval=390 algo.trainer.eval_interval_s=null)
sync=(algo.trainer.asynchronous=false algo.trainer.logging_interval=40)
echo "machine: $(nproc) CPUs; $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1); commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null)"
echo "=== compile cache: a short sync run and a short async run"
warm=150
taskset -c 4-11 timeout -k 10 $warm "${trainer[@]}" "${common[@]}" "${sync[@]}" run_name=warm_sync \
  algo.trainer.num_learning_iterations=60 > "$OUT/warm_sync.log" 2>&1 &
taskset -c 0-3 timeout -k 10 $warm "${trainer[@]}" "${common[@]}" run_name=warm_async \
  algo.trainer.num_learning_iterations=60 > "$OUT/warm_async.log" 2>&1 &
wait
grep -h "start-up: workers\|first update\|^done" "$OUT"/warm_*.log | tail -4
# What the six may take: all that is left but the evaluations, the plot and the archive (75 s), of
# which the training limit leaves 60 s for each run's start-up (compile cache warm) and its end.
six=$(( $(left) - 75 )); limit=$(( six - 60 ))
echo "=== six runs at once, $iterations iterations each, training limit ${limit} s ($(( $(date +%s) - start )) s so far)"
for seed in 1 2 3; do
  a=$(( (seed - 1) * 4 )); s=$(( 12 + seed - 1 ))
  taskset -c "$a-$(( a + 3 ))" timeout -k 10 "$six" "${trainer[@]}" "${common[@]}" "seed=$seed" "run_name=async_s$seed" \
    "algo.trainer.num_learning_iterations=$iterations" "algo.trainer.time_limit_s=$limit" > "$OUT/async_s$seed.log" 2>&1 &
  taskset -c "$s" timeout -k 10 "$six" "${trainer[@]}" "${common[@]}" "${sync[@]}" "seed=$seed" "run_name=sync_s$seed" \
    "algo.trainer.num_learning_iterations=$iterations" "algo.trainer.time_limit_s=$limit" > "$OUT/sync_s$seed.log" 2>&1 &
done
wait
echo "=== done after $(( $(date +%s) - start )) s"
names=(async_s1 async_s2 async_s3 sync_s1 sync_s2 sync_s3)
cpu=0
for r in "${names[@]}"; do  # the six evaluations at once, one CPU each (trainer eval runs on one torch thread)
  cpu=$(( cpu + 1 ))
  timeout -k 5 40 taskset -c "$cpu" "${trainer[@]}" eval "checkpoint=$runs/$r" episodes=10 > "$OUT/$r.eval" 2>&1 &
done
wait
for r in "${names[@]}"; do echo "$r: $(grep -h '^done' "$OUT/$r.log" | cut -c1-110)"; tail -1 "$OUT/$r.eval"; done
timeout -k 5 25 "${trainer[@]}" plot "$runs"/async_s* "$runs"/sync_s* "out=$OUT/walker2d_async_vs_sync.png" | tail -1
(cd "$runs" && tar czf "$OUT/runs.tgz" --exclude='*.pt' async_s* sync_s*)
echo "=== all done after $(( $(date +%s) - start )) s"
