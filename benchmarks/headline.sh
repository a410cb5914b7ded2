#!/usr/bin/env bash
# For the 2-GPU H200 host (nvidia-h200-x2: 32 CPUs, 2 x H200): two runs side by side, each on one half of
# the machine as if it were the 16-core 1-GPU host: the asynchronous trainer with the headline flags
# (GPU 0, CPUs 0-15) beside the synchronous trainer (GPU 1, CPUs 16-31), Humanoid-v5, 500 s of training
# each, then return-vs-wall-clock tables. The headline itself runs on the 1-GPU host: newcomer.sh.
# On the device machine: source .devrun/env.sh && bash benchmarks/headline.sh   (figures: wiki/benchmarks.md)
# ASYNC_EXTRA adds overrides to the async run only, e.g. to compare collector inference on the GPU
# (the default, auto, puts Humanoid's on the collectors' CPUs):
#   ASYNC_EXTRA="algo.trainer.async_options.collector_inference_device=cuda" bash benchmarks/headline.sh
# SECOND_EXTRA set (even empty) makes the second run asynchronous too, with those overrides, in place of
# the synchronous one: two asynchronous variants side by side. TIME_LIMIT (s, default 500) shortens both.
# FASTSAC_PROFILE_LEARNER=50 (exported) profiles 50 loop iterations of each learner inside the run.
set -u
OUT=${OUT:-/tmp/headline}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
root=$PWD; cd /tmp
limit=${TIME_LIMIT:-500}
start=$(date +%s.%N)
common="task=humanoid task.num_envs=448 algo.agent.batch_size=7168 algo.trainer.time_limit_s=$limit console=plain runs_root=/tmp/runs"
async="algo.trainer.async_options.num_collectors=14 algo.trainer.async_options.cpus_per_collector=1 algo.trainer.logging_interval=40"
if [[ -v SECOND_EXTRA ]]; then
  second="run_name=async2 $async $SECOND_EXTRA"; runs="async async2"
else
  second="run_name=sync algo.trainer.asynchronous=false algo.trainer.logging_interval=4"; runs="async sync"
fi
# A second call on a still-warm machine finds the first call's run folders: start from empty ones.
for r in $runs; do rm -rf "/tmp/runs/$r"; done
CUDA_VISIBLE_DEVICES=0 timeout $((limit + 85)) taskset -c 0-15 python3 $root/apps/trainer $common run_name=async $async ${ASYNC_EXTRA:-} > $OUT/async_console.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout $((limit + 85)) taskset -c 16-31 python3 $root/apps/trainer $common $second > $OUT/${runs#* }_console.log 2>&1 &
wait
end=$(date +%s.%N)
echo "wall: $(python3 -c "print(round($end-$start,1))") s"
for r in $runs; do
  echo "=== $r"; python3 $root/benchmarks/return_curve.py /tmp/runs/$r --start-epoch $start --every 30 | tee $OUT/${r}_curve.txt
  tail -n 4 $OUT/${r}_console.log
  # An async run's learner log (with FASTSAC_PROFILE_LEARNER=N: its profile); a sync run has none.
  [[ -f /tmp/runs/$r/logs/learner0.log ]] && cp /tmp/runs/$r/logs/learner0.log $OUT/${r}_learner0.log
  # Where start-up time went (async runs): the learner's and one collector's boot phases.
  grep -h -e " boot: " -e "first update chunk" /tmp/runs/$r/logs/learner0.log /tmp/runs/$r/logs/collector0.log 2>/dev/null | cut -c12-
  ls /tmp/runs/$r/async_errors 2>/dev/null
done
