#!/usr/bin/env bash
# `loom generate` while other processes share the cores: 256 greedy tokens from the demo model's
# shape, alone and beside 1 and 2 busy processes, with a fixed thread count (--threads = the
# cores, what generate did before it backed off) and with the default (--threads 0: all the cores
# while they are free, fewer while others keep some busy, as training does). Prints tokens/s and
# the default's speed over the fixed count's, measured in the same run.
#   bench/generate_contention.sh [BUILD_DIR] [TOKENS]      (default build, 256 tokens)
set -euo pipefail
build=${1:-build}
tokens=${2:-256}
source "$(dirname "$0")/corpus.sh"
bench_workdir "$build" 4000 "a model generates text while other processes share its cores"
cores=$(nproc)

cat > "$work/demo.toml" <<TOML
$(bench_run_section)
$(bench_demo_model "$work")
[train]
steps = 1
global_batch = 2
eval_every = 0
[plugins]
ckpt = "sync"
[checkpoint]
every = 1
dir = "$work/ckpt"
TOML
"$build/bin/loom" train "$work/demo.toml" --run-dir "$work/run" > /dev/null

trap 'stop_busy; rm -rf "$work"' EXIT

tok_per_s() {  # the better of 3 runs: tokens / wall seconds
  local best=0
  for _ in 1 2 3; do
    local t0 t1
    t0=$(date +%s.%N)
    "$build/bin/loom" generate "$work/ckpt" --ids --prompt 1 --temperature 0 --max-tokens "$tokens" --threads "$1" > /dev/null
    t1=$(date +%s.%N)
    best=$(python3 -c "print(max($best, $tokens / ($t1 - $t0)))")
  done
  echo "$best"
}

printf "%-22s %16s %16s %10s\n" "beside" "fixed tok/s" "default tok/s" "ratio"
for load in 0 1 2; do
  start_busy "$load"
  sleep 1
  fixed=$(tok_per_s "$cores")
  adaptive=$(tok_per_s 0)
  stop_busy
  python3 -c "
load, f, a = $load, $fixed, $adaptive
what = f'{load} busy process' + ('es' if load != 1 else '')
print(f'{what:<22} {f:16.0f} {a:16.0f} {a / f:9.2f}x')"
done
