#!/usr/bin/env bash
# Start-up A/B (issue 28): short launches of the README's command (Humanoid), configurations
# alternated round by round (their order reversed every other round) on one machine with one compile
# cache, warmed first by a longer launch, then the start-up figures of each launch (the run's own
# closing line: workers started, workers running, first update, seconds after launch) and the median
# per configuration.
# On the device machine (4 configurations x 3 rounds at 20 s after a 90 s warm-up: about 9 minutes):
#   source .devrun/env.sh && bash benchmarks/start_up_ab.sh def= \
#     nopreload=FASTSAC_PRELOAD_DYNAMO=0 \
#     gpuinf=algo.trainer.async_options.collector_inference_device=cuda \
#     gpuinf_nopreload="algo.trainer.async_options.collector_inference_device=cuda FASTSAC_PRELOAD_DYNAMO=0"
# A configuration is NAME=WORDS: a word NAME=VALUE whose name is in capitals (FASTSAC_PRELOAD_DYNAMO=1)
# is an environment variable of the launch, any other word a trainer override. ROUNDS (3),
# TIME_LIMIT (s, 20), WARM_TIME_LIMIT (s, 90: long enough for the compiled switch to fill the cache),
# OUT (/tmp/start_up_ab: a folder this script made, or a new one).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/start_up_ab}
set -f  # the words of a configuration are split on spaces, never expanded as file patterns
(( $# > 0 )) || { echo "usage: $0 NAME=WORDS [NAME=WORDS ...] (see the script's head)" >&2; exit 2; }
declare -A seen=()
for config in "$@"; do
  name=${config%%=*}
  [[ $config == *=* && $name =~ ^[A-Za-z0-9_.+-]+$ ]] || { echo "not NAME=WORDS: '$config'" >&2; exit 2; }
  [[ -z ${seen[$name]:-} ]] || { echo "configuration '$name' is given twice" >&2; exit 2; }
  seen[$name]=1
done
if [[ -e $out && ! -e $out/.start_up_ab ]]; then
  echo "OUT=$out exists and was not made by this script: choose another folder" >&2; exit 2
fi
rm -rf "$out" && mkdir -p "$out" && touch "$out/.start_up_ab"
# What the configurations set is theirs alone: the caller's own values would reach every launch.
unset TORCHINDUCTOR_CACHE_DIR FASTSAC_PRELOAD_DYNAMO  # the first would take precedence over FASTSAC_COMPILE_CACHE
export FASTSAC_COMPILE_CACHE=$out/cache
launch() {  # seconds, tag, words...
  local limit=$1 tag=$2 envs=() overrides=() word; shift 2
  for word in "$@"; do
    if [[ $word =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$word"); else overrides+=("$word"); fi
  done
  env "${envs[@]}" python3 "$root/apps/trainer" "algo.trainer.time_limit_s=$limit" \
    "${overrides[@]}" console=plain "runs_root=$out/runs" "run_name=$tag" > "$out/$tag.log" 2>&1 \
    || echo "$tag: exit $? (see $out/$tag.log)"
}
first=$1
launch "${WARM_TIME_LIMIT:-90}" warm ${first#*=}
configs=("$@")
for round in $(seq "${ROUNDS:-3}"); do
  order=("${configs[@]}")
  if (( round % 2 == 0 )); then  # every other round in reverse: no configuration always comes first
    order=(); for (( i = ${#configs[@]} - 1; i >= 0; i-- )); do order+=("${configs[i]}"); done
  fi
  for config in "${order[@]}"; do launch "${TIME_LIMIT:-20}" "${config%%=*}.$round" ${config#*=}; done
done
python3 - "$out" "$@" <<'EOF'
import re, statistics, sys
from pathlib import Path
out, names = Path(sys.argv[1]), [c.split("=", 1)[0] for c in sys.argv[2:]]
line = re.compile(r"start-up: workers started ([\d.]+) s, workers running ([\d.]+) s, first update ([\d.]+) s")
print(f"{'launch':<24} {'started':>8} {'running':>8} {'first update':>13}")
for name in names:
    rows = []
    for log in sorted(out.glob(f"{name}.*.log")):
        found = line.findall(log.read_text())
        if found:
            rows.append([float(x) for x in found[-1]])
            print(f"{log.stem:<24} " + " ".join(f"{v:>8.1f}" for v in rows[-1][:2]) + f" {rows[-1][2]:>13.1f}")
        else:
            print(f"{log.stem:<24} no start-up line (see {log})")
    if rows:
        med = [statistics.median(col) for col in zip(*rows)]
        print(f"{name + ' median':<24} {med[0]:>8.1f} {med[1]:>8.1f} {med[2]:>13.1f}")
EOF
