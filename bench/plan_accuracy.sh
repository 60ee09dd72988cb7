#!/usr/bin/env bash
# loom plan's predictions against measured runs on this machine: step time (the fastest step
# after warm-up: neighbours on this shared machine only ever add time, by up to 2x within one
# run, so the fastest step is the machine's own speed and the most repeatable figure; loom plan
# calibrate reads its reference run the same way) and peak memory per rank (rank 0's VmHWM), for layouts of a GPT shaped like the
# demo and of llama-tiny (plus a MoE variant for ep), nproc 1-4. Calibrates first unless a
# cluster file is given.
#   bench/plan_accuracy.sh [BUILD_DIR] [STEPS] [CLUSTER_FILE] [--quick]
#   RECORD=clusters/this-machine.toml bench/plan_accuracy.sh build 12
# --quick runs 5 layouts; targets: median |error| <= 15% and every layout <= 30% for step time,
# <= 10% for memory (issue "loom plan"). RECORD=FILE writes the cluster file the predictions used
# to FILE with a [calibration] section of the measured layouts and their errors: `loom plan`
# then gives each prediction on this machine a band and flags layouts those runs do not cover.
# This machine's speed drifts with its neighbours (the same run has taken 1x-2x as long an hour
# apart): calibrate in the same quiet period as the runs (the default), and read a table taken
# while the machine was busy as noise, not as the model's error.
set -euo pipefail
build=${1:-build}
steps=${2:-12}
cluster=${3:-}
quick=${4:-}
source "$(dirname "$0")/corpus.sh"
bench_workdir "$build" 6000 "planning a layout before renting the cluster saves time and money for everyone"
if [ -z "$cluster" ]; then
  cluster="$work/this-machine.toml"
  echo "calibrating (loom plan calibrate)..." >&2
  "$build/bin/loom" plan calibrate --out "$cluster" > /dev/null
fi
common() {  # the shared sections: all cores per machine (threads = 0), quiet, no evaluation
  printf '[run]\nlog_every = 1000\npeak_gflops = 50\n[data]\ndir = "%s/data"\n[train]\nsteps = %s\neval_every = 0\nglobal_batch = 16\n' "$work" "$steps"
}
{ common; printf '[model]\nn_layer = 4\nn_head = 4\nd_model = 128\nseq_len = 128\n'; } > "$work/demo.toml"
{ common; printf '[model]\npreset = "llama-tiny"\nd_model = 128\nseq_len = 128\n'; } > "$work/llama.toml"
{ common; printf '[model]\npreset = "llama-tiny"\nd_model = 128\nseq_len = 128\n[model.moe]\nexperts = 4\ntop_k = 2\nevery = 2\ndropless = true\n'; } > "$work/moe.toml"
# config | nproc | layout for loom plan --explain | --set flags for loom train
layouts=(
  "demo|1|dp1 mb16|"
  "demo|1|dp1 mb4|train.micro_batch=4"
  "demo|1|dp1 mb16 full|model.recompute=full"
  "demo|1|dp1 mb16 selective|model.recompute=selective"
  "demo|2|dp2 mb8|"
  "demo|2|dp2 zero1 mb8|plugins.data=zero1"
  "demo|2|dp2 zero2 mb8|plugins.data=zero2"
  "demo|2|dp2 zero3 mb8|plugins.data=zero3"
  "demo|2|dp1 tp2 mb16|parallel.tp=2"
  "demo|2|dp1 tp2 sp mb16|parallel.tp=2 plugins.sequence=sp"
  "demo|2|dp1 pp2 1f1b mb4|parallel.pp=2 train.micro_batch=4"
  "demo|2|dp1 pp2 gpipe mb4|parallel.pp=2 train.micro_batch=4 plugins.pipeline=gpipe"
  "demo|2|dp1 pp2 interleavedx2 mb4|parallel.pp=2 train.micro_batch=4 plugins.pipeline=interleaved"
  "demo|2|dp1 cp2 mb16|parallel.cp=2"
  "demo|4|dp4 mb4|"
  "demo|4|dp2 tp2 mb8|parallel.tp=2"
  "llama|1|dp1 mb16|"
  "llama|2|dp1 tp2 mb16|parallel.tp=2"
  "llama|2|dp2 zero1 mb8|plugins.data=zero1"
  "moe|1|dp1 mb16|"
  "moe|2|dp1 ep2 mb8|parallel.ep=2"
)
[ "$quick" = "--quick" ] && layouts=("${layouts[0]}" "${layouts[4]}" "${layouts[8]}" "${layouts[10]}" "${layouts[16]}")
: > "$work/rows.jsonl"
for entry in "${layouts[@]}"; do
  IFS='|' read -r cfg nproc layout sets <<< "$entry"
  args=(--set parallel.nproc=$nproc)
  for s in $sets; do args+=(--set "$s"); done
  dir="$work/run-$(echo "$cfg $layout" | tr ' ' '_')"
  echo "  $cfg, nproc $nproc: $layout" >&2
  "$build/bin/loom" train "$work/$cfg.toml" --run-dir "$dir" "${args[@]}" > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
  predicted=$("$build/bin/loom" plan "$work/$cfg.toml" --cluster "$cluster" --devices "$nproc" --explain "$layout" --json "${args[@]}")
  python3 - "$dir/metrics.jsonl" "$cfg" "$nproc" "$layout" "$predicted" >> "$work/rows.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step_ms"' in l]
warm = rows[3:] if len(rows) > 6 else rows[1:]
p = json.loads(sys.argv[5])
print(json.dumps({"config": sys.argv[2], "nproc": int(sys.argv[3]), "layout": sys.argv[4],
                  "measured_ms": min(r["step_ms"] for r in warm), "predicted_ms": p["step_ms"],
                  "measured_mem": max(r["peak_mem_bytes"] for r in rows), "predicted_mem": p["peak_mem_bytes"]}))
PY
done
python3 - "$work/rows.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'config':7} {'n':>2} {'layout':28} {'measured ms':>12} {'predicted':>10} {'error':>7}   {'mem MiB':>8} {'predicted':>9} {'error':>7}")
t_err, m_err = [], []
for r in rows:
    te = r["predicted_ms"] / r["measured_ms"] - 1
    me = r["predicted_mem"] / r["measured_mem"] - 1
    t_err.append(abs(te)); m_err.append(abs(me))
    print(f"{r['config']:7} {r['nproc']:>2} {r['layout']:28} {r['measured_ms']:12.1f} {r['predicted_ms']:10.1f} {100*te:+6.1f}%"
          f"   {r['measured_mem']/2**20:8.1f} {r['predicted_mem']/2**20:9.1f} {100*me:+6.1f}%")
print(f"\nstep time: median |error| {100*statistics.median(t_err):.1f}% (target 15%), worst {100*max(t_err):.1f}% (target 30%)")
print(f"peak memory: median |error| {100*statistics.median(m_err):.1f}%, worst {100*max(m_err):.1f}% (target 10%)")
PY
if [ -n "${RECORD:-}" ]; then
  python3 - "$work/rows.jsonl" "$cluster" "$RECORD" <<'PY'
import datetime, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
text = open(sys.argv[2]).read().split("\n[calibration]")[0].rstrip() + "\n"
layouts = ", ".join('"%s"' % r["layout"] for r in rows)
residuals = ", ".join("%.4f" % (r["measured_ms"] / r["predicted_ms"] - 1) for r in rows)
text += ("\n[calibration]              # measured step over predicted, less 1 (bench/plan_accuracy.sh)\n"
         f"layouts = [{layouts}]\nresiduals = [{residuals}]\nseq_len = 128\n"
         f'source = "bench/plan_accuracy.sh, {len(rows)} layouts, {datetime.date.today()}"\n')
open(sys.argv[3], "w").write(text)
print(f"wrote {sys.argv[3]}: the cluster file and its [calibration]", file=sys.stderr)
PY
fi
