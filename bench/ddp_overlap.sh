#!/usr/bin/env bash
# DDP scaling on one machine: 2 ranks x 1 thread against 1 rank x 1 thread, the same per-rank
# batch, so a perfect data-parallel step takes as long as the single-rank one. Prints the mean
# step time of each (steps 3.. , the first two warm up) and their ratio (goal <= 1.15).
#   bench/ddp_overlap.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-12}
source "$(dirname "$0")/corpus.sh"
bench_workdir "$build" 60000 "the quick brown fox jumps over the lazy dog while data parallel ranks reduce gradients"
bench_run_section > "$work/ddp.toml"
cat >> "$work/ddp.toml" <<TOML
[model]
n_layer = 4
n_head = 4
d_model = 256
seq_len = 128
[data]
dir = "$work/data"
[train]
steps = $steps
micro_batch = 8
eval_every = 0
TOML
mean_step() {  # mean step_ms over steps >= 3 of a metrics file
  awk -F'"step_ms": ' '/"step": ([3-9]|[1-9][0-9])[,}]/ { split($2, a, ","); s += a[1]; n++ } END { printf "%.1f", s / n }' "$1"
}
"$build/bin/loom" train "$work/ddp.toml" --set train.global_batch=8 --set parallel.nproc=1 \
  --run-dir "$work/one" > "$work/one.log" 2>&1
"$build/bin/loom" train "$work/ddp.toml" --set train.global_batch=16 --set parallel.nproc=2 \
  --run-dir "$work/two" > "$work/two.log" 2>&1
one=$(mean_step "$work/one/metrics.jsonl")
two=$(mean_step "$work/two/metrics.jsonl")
exposed=$(awk -F'"exposed_comm_ms": ' '/"step": ([3-9]|[1-9][0-9])[,}]/ { split($2, a, "}"); s += a[1]; n++ } END { printf "%.1f", s / n }' "$work/two/metrics.jsonl")
echo "1 rank  x 1 thread, batch 8 per rank: step $one ms"
echo "2 ranks x 1 thread, batch 8 per rank: step $two ms (exposed comm $exposed ms)"
awk -v a="$two" -v b="$one" 'BEGIN { printf "step time ratio 2 ranks / 1 rank: %.3f (goal <= 1.15)\n", a / b }'
