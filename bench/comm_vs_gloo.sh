#!/usr/bin/env bash
# loom bench comm (all_reduce through the gloo plugin) against gloo's own AllreduceRingChunked,
# built once and rerun, same buffer size, same ranks, one after the other in this script.
#   bench/comm_vs_gloo.sh [BUILD_DIR] [BYTES] [NPROC]
set -euo pipefail
build=${1:-build}
bytes=${2:-64M}
nproc=${3:-2}
loom_line=$("$build/bin/loom" bench comm --op all_reduce --min-bytes "$bytes" --max-bytes "$bytes" \
  --nproc "$nproc" --iters 20 2>&1 | grep -v '^\[rank [0-9]*\] \[' | grep -v '#' | tail -1)
gloo_line=$("$build/bin/loom" launch -n "$nproc" -- "$build/bin/bench_gloo_baseline" --bytes "$bytes" \
  --iters 20 --reuse 1 2>&1 | grep busbw)
loom_busbw=$(echo "$loom_line" | awk '{print $(NF-1)}')
gloo_busbw=$(echo "$gloo_line" | sed 's/.*busbw \([0-9.]*\) GB\/s.*/\1/')
echo "loom bench comm all_reduce $bytes x $nproc ranks: busbw $loom_busbw GB/s"
echo "gloo AllreduceRingChunked  $bytes x $nproc ranks: busbw $gloo_busbw GB/s"
awk -v a="$loom_busbw" -v b="$gloo_busbw" 'BEGIN { printf "ratio loom/gloo: %.3f (goal >= 0.95)\n", a / b }'
