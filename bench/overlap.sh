#!/usr/bin/env bash
# The communication optimizations of Loom's plugins, each off and on in the same run, where
# communication dominates: 2 namespace nodes x 2 ranks (scripts/local-cluster.sh), llama-tiny,
# both nodes' links rate-limited with tc tbf, once per rate. Per row, on rank 0, over the warm
# steps (all but the first two): the median step time, the exposed communication share (the
# comm meter's exposed_comm_ms / step_ms) and the bytes a step moves (comm_bytes_all; for the
# pipeline row the inter-stage bytes, comm_bytes_pp), then the on/off ratios.
#   bench/overlap.sh [BUILD_DIR] [RATES] [RANKS_PER_NODE]   e.g. bench/overlap.sh build "1gbit 200mbit" 2
# With 2 ranks per node on a 2-core machine the 4 ranks share 2 cores, and the waits in every
# collective include the scheduler's; RANKS_PER_NODE = 1 runs the data-parallel rows at dp 2
# (the pipeline row needs 4 ranks and is skipped).
# The zero-bubble row runs pp4 at m = 8 under 1f1b and zbh1 and prints, in place of the exposed
# share and the bytes, the comm meter's pp_wait_ms / step_ms and rank 0's pipeline bubble
# (1 - compute / schedule time).
# Needs root. The cluster is named "loomoverlap" and removed on exit.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
rates=${2:-1gbit 200mbit}
per_node=${3:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
export LOOM_CLUSTER=loomoverlap
cluster() { bash "$root/scripts/local-cluster.sh" "$@"; }
work=$(mktemp -d)
trap 'cluster down; rm -rf "$work"' EXIT
cluster up 2 >&2
loom=$build/bin/loom

python3 -c "print('\n'.join('the links between the nodes decide how fast this model trains %d' % (i % 29) for i in range(4000)))" \
  > "$work/c.txt"
"$loom" data prepare --text "$work/c.txt" --out "$work/d" > /dev/null
cat > "$work/t.toml" <<EOF
[run]
threads = 1
[model]
preset = "llama-tiny"
[data]
dir = "$work/d"
[train]
steps = 6
global_batch = 8
micro_batch = 2
eval_every = 0
EOF

train() {  # DIR SETS...
  local dir=$1 k
  shift
  for k in 1 0; do
    cluster exec "node$k" env MASTER_ADDR=node0 MASTER_PORT=29470 "$loom" train "$work/t.toml" --run-dir "$dir" \
      --set parallel.nproc="$per_node" "$@" --nnodes 2 --node-rank "$k" > "$dir.node$k.log" 2>&1 &
  done
  wait
  [ -s "$dir/metrics.jsonl" ] || { echo "bench/overlap.sh: the run $* failed:" >&2; tail -5 "$dir.node0.log" >&2; exit 1; }
}

# median step ms, and the means of SHARE_KEY / step_ms and of KEY over the warm steps of a run
# directory
measure() {  # DIR KEY [SHARE_KEY]
  python3 - "$1/metrics.jsonl" "$2" "${3:-exposed_comm_ms}" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][2:]
step = statistics.median(r["step_ms"] for r in rows)
share = statistics.mean(r[sys.argv[3]] / r["step_ms"] for r in rows)
value = statistics.mean(r.get(sys.argv[2], 0) for r in rows)
print(f"{step:.1f} {share:.3f} {value:.3f}" if value < 1 else f"{step:.1f} {share:.3f} {value:.0f}")
EOF
}

runs=0
row() {  # LABEL BYTES_KEY BASE OFF ON [SHARE_KEY]
  local off on
  runs=$((runs + 2))
  train "$work/run$runs-off" $3 $4
  train "$work/run$runs-on" $3 $5
  off=$(measure "$work/run$runs-off" "$2" "${6:-}")
  on=$(measure "$work/run$runs-on" "$2" "${6:-}")
  read -r so xo bo <<< "$off"
  read -r sn xn bn <<< "$on"
  printf '%-34s %9s %9s %6s   %6s %6s %6s   %10s %10s %6s\n' "$1" "$so" "$sn" \
    "$(awk "BEGIN {printf \"%.2f\", $sn / $so}")" "$xo" "$xn" "$(awk "BEGIN {printf \"%.2f\", ($xo <= 0 ? 0 : $xn / $xo)}")" \
    "$bo" "$bn" "$(awk "BEGIN {printf \"%.2f\", ($bo <= 0 ? 0 : $bn / $bo)}")"
}

for rate in $rates; do
  cluster rate node0 "$rate"
  cluster rate node1 "$rate"
  echo "llama-tiny, 2 nodes x $per_node ranks, both links at $rate (tc tbf); warm steps of 6, rank 0"
  printf '%-34s %9s %9s %6s   %6s %6s %6s   %10s %10s %6s\n' "optimization (off -> on)" "step ms" "on" "ratio" \
    "exp.%" "on" "ratio" "bytes/step" "on" "ratio"
  dp="dp$((2 * per_node))"
  row "ddp $dp: bf16 gradient wire" comm_bytes_all "" "--set plugins.ddp.reduce_dtype=fp32" "--set plugins.ddp.reduce_dtype=bf16"
  row "ddp $dp: buckets from the link" comm_bytes_all "" "--set plugins.ddp.bucket_mb=25" "--set plugins.ddp.bucket_mb=0"
  row "zero2 $dp: update gather overlap" comm_bytes_all "--set plugins.data=zero2" "--set plugins.zero2.gather_overlap=false" \
    "--set plugins.zero2.gather_overlap=true"
  row "zero2 $dp: bf16 gradient wire" comm_bytes_all "--set plugins.data=zero2" "--set plugins.zero2.reduce_dtype=fp32" \
    "--set plugins.zero2.reduce_dtype=bf16"
  row "zero3 $dp: prefetch" comm_bytes_all "--set plugins.data=zero3" "--set plugins.zero3.prefetch=false" \
    "--set plugins.zero3.prefetch=true"
  [ "$per_node" = 2 ] && row "dp2 x tp2: tp overlap + bf16 wire" comm_bytes_all "--set parallel.tp=2" \
    "--set plugins.tp.overlap=off --set plugins.ddp.reduce_dtype=fp32" "--set plugins.tp.overlap=on --set plugins.ddp.reduce_dtype=bf16"
  [ "$per_node" = 2 ] && row "pp2 x tp2: scatter/gather" comm_bytes_pp "--set parallel.tp=2 --set parallel.pp=2" \
    "--set plugins.1f1b.scatter_gather=false" "--set plugins.1f1b.scatter_gather=true"
  [ "$per_node" = 2 ] && row "pp4 m8: zbh1 (pp wait, bubble)" pipeline_bubble "--set parallel.pp=4 --set train.micro_batch=1" \
    "--set plugins.pipeline=1f1b" "--set plugins.pipeline=zbh1" pp_wait_ms
  cluster heal node0
  cluster heal node1
  echo
done
