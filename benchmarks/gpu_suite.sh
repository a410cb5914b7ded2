#!/usr/bin/env bash
# The GPU half of the test suite and the GPU benchmarks, in one call on the device machine:
#   source .devrun/env.sh && bash benchmarks/gpu_suite.sh [tests|bench|scaling|all]
# Logs land under $OUT (or /tmp/gpu_suite); each step's tail is printed. Step caps can be lowered with
# TESTS_TIMEOUT, TRANSPORT_TIMEOUT, DRAIN_TIMEOUT (seconds); SKIP_LEARNER=1 leaves out the learner step.
set -uo pipefail
out=${OUT:-/tmp/gpu_suite}
mkdir -p "$out"
what=${1:-all}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
  echo "cpus: $(nproc)"; python3 -c 'import torch; print("torch", torch.__version__)'
} | tee "$out/machine.txt"
step() {  # name, then the command
  local name=$1; shift
  echo "=== $name: $*"
  local t0=$SECONDS
  "$@" > "$out/$name.log" 2>&1
  echo "--- rc=$? in $((SECONDS - t0)) s"
  tail -n 25 "$out/$name.log"
}
if [[ $what == tests || $what == all ]]; then
  # Per-test timeout and an overall cap: a hang must not eat the whole device lease.
  step gpu_tests timeout "${TESTS_TIMEOUT:-420}" python3 -m pytest -m gpu -v -p no:cacheprovider --timeout 120 --tb=short \
    -o addopts="--import-mode=importlib -ra" packages apps tests
fi
if [[ $what == bench || $what == all ]]; then
  [[ ${SKIP_LEARNER:-0} == 1 ]] || step learner timeout 240 python3 benchmarks/learner_updates.py --device cuda --batch-sizes 8192 1024
  step transport timeout "${TRANSPORT_TIMEOUT:-240}" python3 benchmarks/transport_bench.py
  step drain timeout "${DRAIN_TIMEOUT:-120}" python3 benchmarks/async_drain.py --device cuda
fi
if [[ $what == scaling || $what == all ]]; then
  # Emulate the 16-core machine: every process of the benchmark stays on CPUs 0-15.
  step scaling timeout 400 taskset -c 0-15 python3 benchmarks/async_scaling.py --device cuda \
    --collectors 1 2 4 8 14 --seconds 12
fi
