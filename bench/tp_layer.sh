#!/usr/bin/env bash
# One transformer layer (d=384, h=6, T=256, micro-batch 4) timed segment by segment for tp=1,
# tp=2 and tp=2+sp (each with tp overlap off, then on), with the bytes each segment's collectives moved next to the formula: 4
# collectives of b*s*h elements per layer per micro-batch, forward and backward (Megatron; sp
# swaps each all-reduce for an all-gather/reduce-scatter pair of the same bytes).
#   bench/tp_layer.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-6}
source "$(dirname "$0")/corpus.sh"
bench_workdir "$build" 40000 "tensor parallel layers split their weights across ranks and reduce activations"
bench_run_section > "$work/layer.toml"
cat >> "$work/layer.toml" <<TOML
profile_layer = true
[model]
n_layer = 1
n_head = 6
d_model = 384
seq_len = 256
[data]
dir = "$work/data"
[train]
steps = $steps
global_batch = 4
eval_every = 0
TOML
b=4 s=256 h=384
echo "formula: 4 collectives x b*s*h = 4 x $((b * s * h)) fp32 = $((4 * b * s * h * 4)) bytes per layer per micro-batch"
for layout in "--set parallel.nproc=1" "--set parallel.nproc=2 --set parallel.tp=2 --set plugins.tp.overlap=off" \
              "--set parallel.nproc=2 --set parallel.tp=2 --set plugins.tp.overlap=on" \
              "--set parallel.nproc=2 --set parallel.tp=2 --set plugins.sequence=sp --set plugins.tp.overlap=off" \
              "--set parallel.nproc=2 --set parallel.tp=2 --set plugins.sequence=sp --set plugins.tp.overlap=on"; do
  echo
  echo "== $layout"
  rm -rf "$work/run"  # each layout trains fresh
  "$build/bin/loom" train "$work/layer.toml" $layout --run-dir "$work/run" 2>&1 \
    | sed -n '/block0 profile/,/total/p' | sed 's/^\[rank 0\] //'
  awk '/"step": '"$steps"'[,}]/ { match($0, /"activation_bytes": [0-9]+/); print "activation bytes per rank: " substr($0, RSTART + 20, RLENGTH - 20) }' "$work/run/metrics.jsonl"
  python3 - "$work/run/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][2:]
med = lambda k: statistics.median(r.get(k, 0) for r in rows)
print("median warm step: %.1f ms, tp collectives in flight %.1f ms, training blocked on them %.1f ms"
      % (med("step_ms"), med("comm_ms"), med("exposed_comm_ms")))
PY
done
