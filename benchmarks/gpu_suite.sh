#!/usr/bin/env bash
# The GPU half of the test suite and the GPU benchmarks, in one call on a GPU host (the 1-GPU H200 host,
# nvidia-h200, or the 2-GPU one: the tests use every CPU, the benchmarks GPU 0 and CPUs 0-15):
#   source .devrun/env.sh && bash benchmarks/gpu_suite.sh [tests|bench|learner|scaling|all]
# Logs land under $OUT (or /tmp/gpu_suite); each step's tail is printed. Step caps can be lowered with
# TESTS_TIMEOUT (per test group), TRANSPORT_TIMEOUT, DRAIN_TIMEOUT (seconds); SKIP_LEARNER=1 leaves out the learner step.
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
  # Five pytest groups, each on its own CPUs and with its own log (two of them in turn on the same
  # CPUs): a failure's traceback survives a hang elsewhere, and the whole suite takes a few minutes.
  # Per-test timeout plus a cap per group: a hang must not eat the device lease.
  # The four package groups share the first half of the CPUs; the app and end-to-end group (whole
  # trainer runs, most of the time) gets the second half and, where pytest-xdist is installed, runs
  # n/4 tests at once (one group on 3 of 16 CPUs ran past 540 s; with 5 workers it took 77 s).
  cap=${TESTS_TIMEOUT:-400}
  group() {  # name, cpus, pytest args...
    local name=$1 cpus=$2; shift 2
    timeout "$cap" taskset -c "$cpus" python3 -m pytest -m gpu -v -p no:cacheprovider --timeout 300 \
      --tb=long -rA -o addopts="--import-mode=importlib" "$@" > "$out/tests_$name.log" 2>&1
    echo "--- tests_$name rc=$?"
  }
  n=$(nproc); q=$(( n / 8 ))
  cpus() { if (( q > 0 )); then echo "$(( $1 * q ))-$(( ($1 + 1) * q - 1 ))"; else echo "0-$(( n - 1 ))"; fi; }
  rest_cpus=$(( q > 0 ? 4 * q : 0 ))-$(( n - 1 ))
  parallel=()
  if (( n >= 8 )) && python3 -c "import xdist" 2>/dev/null; then
    parallel=(-n "$(( n / 4 ))" -p no:benchmark)  # pytest-benchmark refuses to run under xdist
  fi
  # fastsac-core's compiling tests (the longest package group: wiki/benchmarks.md, "The scripts") get
  # two quarters and two xdist workers where xdist is installed; the short transport and async groups
  # then share one quarter in turn, each with half the cap, so the pair is bounded by one cap.
  core=packages/fastsac-core/tests
  if (( q > 0 )) && [[ ${#parallel[@]} -gt 0 ]]; then
    group core "$(cpus 0),$(cpus 3)" -n 2 -p no:benchmark $core --ignore=$core/test_step_graph.py &
    { cap=$(( cap / 2 )); group transport "$(cpus 2)" packages/shm-transport/tests
      group async "$(cpus 2)" packages/fastsac-async/tests; } &
  else
    group core "$(cpus 0)" $core --ignore=$core/test_step_graph.py &
    group transport "$(cpus 2)" packages/shm-transport/tests &
    group async "$(cpus 3)" packages/fastsac-async/tests &
  fi
  group graphs "$(cpus 1)" $core/test_step_graph.py &
  group rest "$rest_cpus" "${parallel[@]}" packages/numa-bind packages/topology apps tests &
  wait
  grep -h -E "^(PASSED|FAILED|ERROR|SKIPPED) |[0-9]+ (passed|failed)" "$out"/tests_*.log
fi
if [[ $what == bench || $what == all || $what == learner ]]; then
  # The headline's update, by what one CUDA graph covers (fastsac_core Note [Whole-step graphs]), on one
  # CPU and one torch thread like a learner's main thread.
  [[ ${SKIP_LEARNER:-0} == 1 ]] || step learner timeout 420 taskset -c 1 python3 benchmarks/learner_updates.py \
    --device cuda --task humanoid --batch-sizes 7168 --modes compiled step eager-step step-eager-prep --threads 1
fi
if [[ $what == bench || $what == all ]]; then
  step transport timeout "${TRANSPORT_TIMEOUT:-240}" python3 benchmarks/transport_bench.py
  step drain timeout "${DRAIN_TIMEOUT:-120}" python3 benchmarks/async_drain.py --device cuda
fi
if [[ $what == scaling || $what == all ]]; then
  # Emulate the 16-core machine: every process of the benchmark stays on CPUs 0-15.
  step scaling timeout 480 taskset -c 0-15 python3 benchmarks/async_scaling.py --device cuda \
    --parts scaling --collectors 1 2 4 8 14 --seconds 20
  step learner_in_run timeout 300 taskset -c 0-15 python3 benchmarks/async_scaling.py --device cuda \
    --parts learner inference --collectors 1 2 4 8 14 --seconds 60
fi
