#!/usr/bin/env bash
# Context parallelism: ring attention at each context length T and cp degree, three ways in the
# same run, so machine drift cancels in the comparisons:
#   zigzag      the default: two mirrored chunks per rank, next block sent while computing
#   no-overlap  zigzag, but each transfer waited for before computing: its exposed time is the
#               transfers' own time, the baseline for the hidden share
#   contiguous  one chunk per rank: the causal mask leaves the first ranks idle
# Printed per row (step 2 of 2, rank 0, one sequence of llama-tiny widened to 4 blocks of d 256):
#   step_ms, hidden = 1 - exposed(overlap) / exposed(no overlap), the ring's share that compute
#   covered, and imbalance = busiest / idlest rank's attention time over the cp group.
# On this 2-core machine cp ranks share cores, so times are noisy; the ratios are what to read.
#   bench/context_parallel.sh [BUILD_DIR] [T ...]        (default T: 4096 8192; up to 32768 works)
set -euo pipefail
build=${1:-build}
shift || true
lengths=${*:-4096 8192}
source "$(dirname "$0")/corpus.sh"
bench_workdir "$build" 30000 "ring attention passes each block of keys and values round the context parallel group"

config() {  # config T: the model at context T
  bench_run_section
  cat <<TOML
[model]
preset = "llama-tiny"
d_model = 256
n_head = 8
n_kv_head = 4
seq_len = $1
[data]
dir = "$work/data"
[train]
steps = 2
global_batch = 1
eval_every = 0
TOML
}

# run NAME T CP SETS...: train, then print step 2's metrics as "step_ms exposed max min"
run() {
  local name=$1 T=$2 cp=$3
  shift 3
  config "$T" > "$work/$name.toml"
  "$build/bin/loom" train "$work/$name.toml" --run-dir "$work/$name" --set parallel.nproc="$cp" \
    --set parallel.cp="$cp" "$@" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
  python3 - "$work/$name/metrics.jsonl" <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])][-1]
print(m["step_ms"], m["cp_exposed_comm_ms"], m["cp_attention_ms_max"], m["cp_attention_ms_min"])
PY
}

printf '%-7s %-3s %-11s %10s %12s %8s %10s\n' T cp split step_ms exposed_ms hidden imbalance
for T in $lengths; do
  for cp in 2 4; do
    read -r z_ms z_exp z_max z_min < <(run "z$T-$cp" "$T" "$cp")
    read -r n_ms n_exp _ _ < <(run "n$T-$cp" "$T" "$cp" --set plugins.cp.overlap=false)
    read -r c_ms c_exp c_max c_min < <(run "c$T-$cp" "$T" "$cp" --set plugins.cp.split=contiguous)
    python3 - "$T" "$cp" "$z_ms" "$z_exp" "$z_max" "$z_min" "$n_ms" "$n_exp" "$c_ms" "$c_exp" "$c_max" "$c_min" <<'PY'
import sys
T, cp = sys.argv[1], sys.argv[2]
z_ms, z_exp, z_max, z_min, n_ms, n_exp, c_ms, c_exp, c_max, c_min = map(float, sys.argv[3:])
hidden = 1 - z_exp / n_exp if n_exp > 0 else float("nan")
row = "%-7s %-3s %-11s %10.0f %12.1f %8s %10s"
print(row % (T, cp, "zigzag", z_ms, z_exp, "%.0f%%" % (100 * hidden), "%.2f" % (z_max / z_min)))
print(row % (T, cp, "no-overlap", n_ms, n_exp, "(base)", ""))
print(row % (T, cp, "contiguous", c_ms, c_exp, "", "%.2f" % (c_max / c_min)))
print("%-7s %-3s zigzag step time / contiguous: %.2f" % (T, cp, z_ms / c_ms))
PY
  done
done
