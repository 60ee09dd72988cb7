#!/usr/bin/env bash
# ZeRO against DDP at dp = 2 in one run: median step time, the bytes each rank sent per step next
# to the textbook volumes (2(n-1)/n Ψ·4 bytes for ddp, zero1 and zero2; 3(n-1)/n Ψ·4 for zero3),
# and each rank's model-state bytes for dp = 1, 2, 4 next to the ZeRO formulas for fp32 training
# (REFERENCE.md: params 4Ψ, grads 4Ψ, Adam 8Ψ; stage 1 shards Adam, 2 also grads, 3 also params).
#   bench/zero.sh [BUILD_DIR] [STEPS]
# The ratio column is step time over ddp's, measured in this same script.
set -euo pipefail
build=${1:-build}
steps=${2:-8}
source "$(dirname "$0")/corpus.sh"
bench_workdir "$build" 20000 "sharded optimizer states gradients and parameters save memory on every rank"
bench_run_section > "$work/zero.toml"
cat >> "$work/zero.toml" <<TOML
[model]
n_layer = 8
n_head = 4
d_model = 256
d_ff = 1024
seq_len = 64
[data]
dir = "$work/data"
[train]
steps = $steps
eval_every = 0
TOML
run() {  # run NAME DP DATA: train, leave metrics in $work/NAME
  "$build/bin/loom" train "$work/zero.toml" --run-dir "$work/$1" --set parallel.nproc=$2 \
    --set train.global_batch=$2 $( [ -n "$3" ] && echo --set plugins.data=$3 ) > "$work/$1.log" 2>&1 \
    || { cat "$work/$1.log"; exit 1; }
}
run one 1 ""
for data in ddp zero1 zero2 zero3; do run "$data-2" 2 $data; done
for data in zero1 zero2 zero3; do run "$data-4" 4 $data; done
python3 - "$work" <<'PY'
import json, statistics, sys, os
work = sys.argv[1]
def rows(name):
    return [json.loads(l) for l in open(os.path.join(work, name, "metrics.jsonl"))]
psi = rows("one")[-1]["param_bytes"] / 4
print("model: %.2fM parameters (Ψ); 4Ψ = %.1f MiB" % (psi / 1e6, 4 * psi / 2**20))
print()
print("dp = 2, one micro-batch per rank per step")
print("%-6s %12s %8s %16s %16s %8s" % ("data", "step ms", "vs ddp", "sent MiB/step", "textbook MiB", "ratio"))
base = None
for data in ("ddp", "zero1", "zero2", "zero3"):
    r = rows(data + "-2")
    ms = statistics.median(x["step_ms"] for x in r[1:])
    base = base or ms
    sent = r[-1]["data_comm_bytes"]
    book = (3 if data == "zero3" else 2) * (2 - 1) / 2 * psi * 4
    print("%-6s %12.1f %8.2f %16.2f %16.2f %8.3f" % (data, ms, ms / base, sent / 2**20, book / 2**20, sent / book))
print()
print("model-state MiB per rank (params + grads + Adam), measured vs formula; comm buffers apart")
print("%-6s %3s %10s %10s %10s %10s %10s %8s %12s" % ("data", "dp", "params", "grads", "adam", "total", "formula", "ratio", "buffers"))
def formula(stage, n):
    return {0: 16, 1: 8 + 8 / n, 2: 4 + 12 / n, 3: 16 / n}[stage] * psi
for name, stage, n in [("one", 0, 1), ("ddp-2", 0, 2), ("zero1-2", 1, 2), ("zero2-2", 2, 2), ("zero3-2", 3, 2),
                       ("zero1-4", 1, 4), ("zero2-4", 2, 4), ("zero3-4", 3, 4)]:
    x = rows(name)[-1]
    total = x["param_bytes"] + x["grad_bytes"] + x["optim_bytes"]
    label = "none" if name == "one" else name.split("-")[0]
    print("%-6s %3d %10.2f %10.2f %10.2f %10.2f %10.2f %8.3f %12.2f" % (
        label, n, x["param_bytes"] / 2**20, x["grad_bytes"] / 2**20, x["optim_bytes"] / 2**20,
        total / 2**20, formula(stage, n) / 2**20, total / formula(stage, n), x["comm_buffer_bytes"] / 2**20))
PY
