#!/usr/bin/env bash
# Expert parallelism against plain data parallelism at two ranks, in one script: the same MoE
# model (8 experts, top 2, every second block) trained under dp = 2 (every rank holds all experts)
# and ep = 2 (each rank holds 4), plus ep = 2 with zero1. Prints the median step time and its
# ratio to dp = 2, the all-to-all time per step (count exchange, dispatch and combine, forward
# and backward, over every MoE layer), the parameter bytes each rank holds, and how far each
# run's losses and gradient norms stray from the single-rank run.
#   bench/moe_ep.sh [BUILD_DIR] [STEPS] [COMM]      (COMM: gloo or mpi; default mpi when present)
set -euo pipefail
build=${1:-build}
steps=${2:-12}
comm=${3:-$(command -v mpirun > /dev/null && echo mpi || echo gloo)}
source "$(dirname "$0")/corpus.sh"
bench_workdir "$build" 20000 "experts take the tokens routed to them and send the outputs home again"
bench_run_section > "$work/moe.toml"
cat >> "$work/moe.toml" <<TOML
[model]
n_layer = 4
n_head = 4
d_model = 128
d_ff = 512
seq_len = 128
moe = { experts = 8, top_k = 2, every = 2, capacity_factor = 1.25 }
[data]
dir = "$work/data"
[train]
steps = $steps
global_batch = 8
eval_every = 0
TOML
run() {  # run NAME NPROC [--set ...]: train, leave metrics in $work/NAME
  local name=$1 n=$2
  shift 2
  if [ "$comm" = mpi ] && [ "$n" -gt 1 ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np "$n" --oversubscribe \
      --mca btl self,vader,tcp --mca btl_tcp_if_include lo "$build/bin/loom" train "$work/moe.toml" \
      --run-dir "$work/$name" --set plugins.comm=mpi --set parallel.nproc=1 --set run.threads=1 "$@" > "$work/$name.log" 2>&1
  else
    "$build/bin/loom" train "$work/moe.toml" --run-dir "$work/$name" --set parallel.nproc=$n "$@" > "$work/$name.log" 2>&1
  fi || { cat "$work/$name.log"; exit 1; }
}
run one 1
run dp2 2
run ep2 2 --set parallel.ep=2
run ep2-zero1 2 --set parallel.ep=2 --set plugins.data=zero1
python3 - "$work" "$comm" <<'PY'
import json, statistics, sys, os
work, comm = sys.argv[1], sys.argv[2]
def rows(name): return [json.loads(l) for l in open(os.path.join(work, name, "metrics.jsonl"))]
one = rows("one")
base = statistics.median(r["step_ms"] for r in rows("dp2")[2:])
print("2 ranks on 2 cores, comm %s; 8 experts of d_ff 512 in 2 of 4 blocks, batch 8 x 128" % comm)
print("%-12s %9s %9s %16s %15s %16s" % ("layout", "step ms", "vs dp=2", "all-to-all ms", "param MiB/rank", "max rel diff"))
for name in ("dp2", "ep2", "ep2-zero1"):
    r = rows(name)
    ms = statistics.median(x["step_ms"] for x in r[2:])
    a2a = statistics.median(sum(v for k, v in x.items() if k.endswith(".all_to_all_ms")) for x in r[2:])
    diff = max(max(abs(a["loss"] - b["loss"]) / a["loss"], abs(a["grad_norm"] - b["grad_norm"]) / a["grad_norm"])
               for a, b in zip(one, r))
    print("%-12s %9.1f %9.2f %16.1f %15.2f %16.1e" % (name, ms, ms / base, a2a, r[-1]["param_bytes"] / 2**20, diff))
PY
