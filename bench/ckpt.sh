#!/usr/bin/env bash
# The training stall of a checkpoint save, async writer against sync writer, one after the other
# in this script, same model and state (~75 MiB of parameters and AdamW moments). A save step's
# stall is its step time minus the median of the steps that save nothing; prints both stalls
# and async/sync (goal <= 0.10).
#   bench/ckpt.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-40}
source "$(dirname "$0")/corpus.sh"
bench_workdir "$build" 40000 "a checkpoint saved while training goes on costs the step only its copy"
cat > "$work/ck.toml" <<TOML
[run]
log_every = 1000
[model]
n_layer = 6
n_head = 8
d_model = 384
seq_len = 64
[data]
dir = "$work/data"
[train]
steps = $steps
global_batch = 4
eval_every = 0
[checkpoint]
every = 10
keep_last = 1
TOML
for writer in sync async; do
  "$build/bin/loom" train "$work/ck.toml" --run-dir "$work/$writer" --set plugins.ckpt=$writer > "$work/$writer.out"
done
python3 - "$work" <<'PY'
import json, statistics, sys
work = sys.argv[1]
def stall(writer):
    rows = [json.loads(l) for l in open(f"{work}/{writer}/metrics.jsonl")]
    save = [r["step_ms"] for r in rows if r["step"] % 10 == 0 and r["step"] != rows[-1]["step"]]
    plain = [r["step_ms"] for r in rows[2:] if r["step"] % 10 != 0]
    base = statistics.median(plain)
    print(f"{writer:5} save-step stalls (ms): " + ", ".join(f"{x - base:.0f}" for x in save))
    return statistics.mean(save) - base, base
s, sb = stall("sync")
a, ab = stall("async")
print(f"state per save: ~{6 * (12 * 384 * 384 + 13 * 384) * 3 * 4 / 2**20 + 3 * 256 * 384 * 4 / 2**20 + 3 * 64 * 384 * 4 / 2**20:.0f} MiB")
print(f"sync  writer: step {sb:.1f} ms, save-step stall {s:.1f} ms")
print(f"async writer: step {ab:.1f} ms, save-step stall {a:.1f} ms")
print(f"async/sync stall: {a / s:.3f} (goal <= 0.10)")
PY
