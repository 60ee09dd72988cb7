#!/usr/bin/env bash
# A mixed cluster on one machine: two namespace nodes (scripts/local-cluster.sh), node0 held to
# half a core (`slow node0 0.5`). Calibrates the groups' node kinds on the nodes themselves (one
# one-thread rank on node1's free core and on node0's held one), plans the job on
# clusters/this-machine-halved.toml, and trains the planner's layout and the same
# layout with the devices-alike split, ROUNDS times each, alternating. Prints each round's median
# step (steps after the first two), the prediction, and the speed-up of the planner's split.
#   bench/mixed_cluster.sh [BUILD_DIR] [ROUNDS] [D_MODEL]     e.g. bench/mixed_cluster.sh build 3 192
# Needs root. The cluster is named "loommixed" and removed on exit.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
rounds=${2:-3}
d_model=${3:-192}
root=$(cd "$(dirname "$0")/.." && pwd)
loom=$build/bin/loom
work=$(mktemp -d /tmp/loom-mixed-XXXXXX)
export LOOM_CLUSTER=loommixed
cluster() { bash "$root/scripts/local-cluster.sh" "$@"; }
trap 'cluster down; rm -rf "$work"' EXIT

for i in $(seq 0 499); do echo "a mixed cluster balances its pipeline stages $((i % 13))"; done > "$work/c.txt"
"$loom" data prepare --text "$work/c.txt" --out "$work/d" > /dev/null
cat > "$work/job.toml" <<TOML
[run]
threads = 1
[model]
n_layer = 6
n_head = 4
d_model = $d_model
seq_len = 128
vocab_size = 256
[data]
dir = "$work/d"
[train]
steps = 10
global_batch = 32
eval_every = 0
TOML
cluster up 2 > /dev/null
cluster slow node0 0.5
echo "calibrating a core on node1 and the held one on node0 (loom plan calibrate --cores 1)..." >&2
cluster exec node1 "$loom" plan calibrate --cores 1 --max-ranks 1 --name this-machine-core --out "$work/this-machine-core.toml" > /dev/null 2>&1
cluster exec node0 "$loom" plan calibrate --cores 1 --max-ranks 1 --name this-machine-core-halved \
  --out "$work/this-machine-core-halved.toml" > /dev/null 2>&1
cp "$root/clusters/this-machine-halved.toml" "$work/halved.toml"
"$loom" plan "$work/job.toml" --cluster "$work/halved.toml" --top 3 | sed -n '4,7p' >&2
"$loom" plan "$work/job.toml" --cluster "$work/halved.toml" --emit 1 --out "$work/mixed.toml" > /dev/null
# The planner's order puts the slow group on node 0 or node 1: hold that node.
if grep -q "^groups = \[ 'fast" "$work/mixed.toml"; then cluster heal node0; cluster slow node1 0.5; fi

run() {  # NAME [--set ...]: trains on both nodes, prints "median predicted"
  local name=$1 k pids=; shift
  rm -rf "$work/$name"
  for k in 1 0; do
    cluster exec "node$k" env MASTER_ADDR=node0 MASTER_PORT=29480 "$loom" train "$work/mixed.toml" --run-dir "$work/$name" \
      --nnodes 2 --node-rank "$k" "$@" > "$work/$name.node$k.out" 2>&1 &
    pids="$pids $!"
  done
  wait $pids
  python3 - "$work/$name" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
steps = [r["step_ms"] for r in rows if "step_ms" in r][2:]
plan = json.load(open(sys.argv[1] + "/plan.json"))
print(f"{statistics.median(steps):.1f} {plan['predicted_step_ms']:.1f}")
PY
}

split=$(awk -F"'" '/^pp_layout/ {print $2}' "$work/mixed.toml")
echo "groups in node order: $(awk -F"'" '/^groups/ {print $2, $4}' "$work/mixed.toml")"
printf "%-6s %-28s %10s %10s %7s   %-28s %10s %10s %7s   %8s\n" round "planner's split" "predicted" "measured" "error" \
  "uniform split" "predicted" "measured" "error" "faster"
for r in $(seq 1 "$rounds"); do
  read -r um up <<< "$(run uneven)"
  read -r vm vp <<< "$(run uniform --set parallel.pp_layout=)"
  awk -v r="$r" -v s="$split" -v um="$um" -v up="$up" -v vm="$vm" -v vp="$vp" 'BEGIN {
    printf "%-6s %-28s %10.1f %10.1f %+6.1f%%   %-28s %10.1f %10.1f %+6.1f%%   %7.1f%%\n", r, s, up, um, 100 * (um / up - 1),
      "(schedule plugin default)", vp, vm, 100 * (vm / vp - 1), 100 * (1 - um / vm) }'
done
