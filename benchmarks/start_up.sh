#!/usr/bin/env bash
# Humanoid's start-up and early learning on the 1-GPU H200 host (issue 28): the README's command, one
# configuration per call of this script, each run with an empty compile cache of its own
# (FASTSAC_COMPILE_CACHE), so every run is cold without a fresh machine. Then sweep.py's table: the first
# update, the compiled switch, training return 5,000 and in-run eval 10,500 (seconds after launch), the
# final checkpoint's deterministic eval.
# On the device machine (one configuration: about 6.5 min at the default 300 s):
#   source .devrun/env.sh && bash benchmarks/start_up.sh first
#   source .devrun/env.sh && bash benchmarks/start_up.sh background
# Configurations: first (compile before the first update), background (compile_in_background with its
# compile warmer: the defaults), thread (compile_in_background without the warmer),
# or NAME=OVERRIDES for anything else. TIME_LIMIT (s, default 300), SEED (1), OUT (/tmp/start_up).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/start_up}
case ${1:?a configuration: first, background, thread or NAME=OVERRIDES} in
  first) config="first=algo.agent.compile_in_background=false" ;;
  background) config="background=algo.agent.compile_in_background=true" ;;
  thread) config="thread=algo.agent.compile_in_background=true algo.agent.compile_warmer=false" ;;
  *=*) config=$1 ;;
  *) echo "unknown configuration: $1 (first, background, thread or NAME=OVERRIDES)" >&2; exit 2 ;;
esac
name=${config%%=*}
cache="$out/cache-$name"
# Bytecode beside every module, as an installed environment has it (pip and uv sync write it; the
# device's carried wheels are installed with --no-compile): "cold" means an empty compile cache, not a
# Python that compiles torch's source again in every new process (the parent, the fork server, the
# warmer, inductor's compile workers). Folders it cannot write keep what they have; up-to-date files
# are skipped, so a second call costs little.
paths=${PYTHONPATH:-}
python3 -m compileall -q -j 0 "$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')" \
  "$root/packages" "$root/apps" ${paths//:/ } > /dev/null 2>&1 || true
# A cold cache, and no earlier call's run folder, table or logs (sweep.py adds to those).
rm -rf "$cache" "$out/runs-$name" "$out/$name.json" "$out/$name".*
mkdir -p "$out"
unset TORCHINDUCTOR_CACHE_DIR  # it would take precedence over FASTSAC_COMPILE_CACHE
FASTSAC_COMPILE_CACHE=$cache python3 "$root/benchmarks/sweep.py" --task humanoid --parallel 1 \
  --seeds "${SEED:-1}" --time-limit "${TIME_LIMIT:-300}" --config "$config" --reach 5000 --reach-eval 10500 \
  --runs-root "$out/runs-$name" --json "$out/$name.json"
# What the run's logs (kept by sweep.py only for a run that succeeded) say of its start: the start-up
# line, the learner's compile lines (warmer, switch), the learner's and the first collector's boot
# phases, and every worker's release (seconds since that worker's own start; the fork server's
# preload comes before).
logs=$(ls -d "$out/$name".*.logs 2>/dev/null | head -n 1 || true)
[[ -n $logs ]] || { echo "no logs of the run were kept: see sweep.py's lines above"; exit 0; }
grep -h -e "start-up:" "$logs/trainer.log" 2>/dev/null | tail -n 1 || true
grep -h -e "compile warmer" -e "compiled update ready" -e "first update chunk" "$logs/learner0.log" \
  2>/dev/null | cut -c1-220 || true
grep -h " boot: " "$logs/learner0.log" "$logs/collector0.log" 2>/dev/null | sed 's/^.*boot: //' || true
grep -h " boot: released" "$logs"/*.log 2>/dev/null | sed 's/^.* INFO //; s/ fastsac_async.worker_process:.*(/ (/' || true
# Where the start before the workers' own went: the first forks (the first one waits for the fork
# server's imports) and each worker's time from its fork to its first line.
grep -h "spawned " "$logs/trainer.log" 2>/dev/null | sed 's/^.*spawned /spawned /' | head -n 3 || true
grep -h " started (pid" "$logs"/*.log 2>/dev/null | sed 's/^.* INFO [^ ]* [^ ]* //' | sort -t, -k3 | tail -n 3 || true
