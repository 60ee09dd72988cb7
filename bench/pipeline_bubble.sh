#!/usr/bin/env bash
# Pipeline bubbles and first-stage activation memory, measured from each run's Chrome traces:
# p = 4 stages, m = 4, 8, 12, 16 micro-batches (and p = 2, which this 2-core machine can run
# without sharing a core), under gpipe, 1f1b, interleaved (v = 2) and zbh1, next to the theory
# (REFERENCE.md): bubble (p-1)/(v m + p-1), zbh1's (p-1)/(3m + p-1) with F = B = W; the first
# stage holds m micro-batches of activations under gpipe and at most p under 1f1b and zbh1.
#   [PPS="2 4"] [SCHEDULES="gpipe 1f1b interleaved zbh1"] bench/pipeline_bubble.sh [BUILD_DIR] [STEPS]
# Bubble = 1 - (forward + backward + weight time) / (schedule time), per rank, from trace/rank<N>.json;
# the median over steps 2.. and the mean over ranks. The four ranks share this machine's cores,
# so a rank's compute slows while others run: the measured numbers carry that, the theory does not.
# The ranks talk over the mpi plugin (shared memory, idle ranks yield) when mpirun is there:
# gloo's point-to-point path stalls for tens of ms when its progress threads compete with four
# busy ranks on two cores (docs/pipeline.md), which would measure gloo, not the schedule.
# COMM=gloo forces gloo.
set -euo pipefail
build=${1:-build}
steps=${2:-6}
source "$(dirname "$0")/corpus.sh"
bench_workdir "$build" 20000 "pipeline stages pass activations forward and gradients back between ranks"
bench_run_section > "$work/pp.toml"
cat >> "$work/pp.toml" <<TOML
trace = true
[model]
n_layer = 6
n_head = 4
d_model = 128
d_ff = 512
seq_len = 128
[data]
dir = "$work/data"
[train]
steps = $steps
micro_batch = 1
eval_every = 0
TOML
comm=${COMM:-mpi}
command -v mpirun > /dev/null || comm=gloo
launch() {
  if [ "$comm" = mpi ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np $p --oversubscribe \
      --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca mpi_yield_when_idle 1 "$@" --set plugins.comm=mpi
  else
    "$@" --set parallel.nproc=$p
  fi
}
echo "$(nproc) cores, comm $comm; model: 6 blocks, d 128, T 128, micro-batch 1"
printf "%2s %-16s %3s %14s %14s %12s %10s %16s %16s\n" p schedule m "bubble (trace)" "bubble (theory)" "schedule ms" "in flight" "act. MiB (rank0)" "peak RSS MiB r0"
for p in ${PPS:-2 4}; do
 for m in $([ $p = 2 ] && echo 2 4 8 16 || echo 4 8 12 16); do
  for sched in ${SCHEDULES:-gpipe 1f1b interleaved zbh1}; do
    rm -rf "$work/run"
    launch "$build/bin/loom" train "$work/pp.toml" --run-dir "$work/run" --set plugins.pipeline=$sched \
      --set train.global_batch=$m --set parallel.pp=$p > "$work/log" 2>&1 || { cat "$work/log"; exit 1; }
    python3 - "$work/run" "$sched" "$m" "$p" <<'PY'
import json, statistics, sys, glob, os
run, sched, m, p = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
v = 2 if sched == "interleaved" else 1
per_rank = []
for path in sorted(glob.glob(os.path.join(run, "trace", "rank*.json"))):
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    windows = [e for e in ev if e["name"] == "schedule"]
    bubbles = []
    for w in windows[1:]:  # step 1 warms caches and sockets
        lo, hi = w["ts"], w["ts"] + w["dur"]
        busy = sum(e["dur"] for e in ev if e["cat"] in ("forward", "backward", "weight") and lo <= e["ts"] < hi)
        bubbles.append(1 - busy / w["dur"])
    per_rank.append(statistics.median(bubbles))
    if path.endswith("rank0.json"): schedule_ms = statistics.median(w["dur"] for w in windows[1:]) / 1000
last = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))][-1]
rss = json.load(open(os.path.join(run, "ranks.json")))["peak_mem_bytes"][0]
theory = (p - 1) / (3 * m + p - 1) if sched == "zbh1" and m >= p else (p - 1) / (v * m + p - 1)
print("%2d %-16s %3d %13.1f%% %14.1f%% %12.1f %10d %16.1f %16.1f" % (
    p, sched + (" (v=2)" if v > 1 else ""), m, 100 * sum(per_rank) / len(per_rank), 100 * theory, schedule_ms,
    last["pipeline_in_flight"], last["pipeline_activation_bytes"] / 2**20, rss / 2**20))
PY
  done
 done
done
echo "in flight: micro-batch chunks whose activations rank 0 (the first stage) held at once, as run"
echo "(an interleaved chunk is half a micro-batch's layers on this rank)."
