#!/usr/bin/env bash
# Does the load-balancing loss even out the experts? The demo model with every second block a
# MoE layer (8 experts, top 2, dropless) trains on the demo corpus for STEPS steps twice in this
# script, with aux_coef = 0 and with the default 0.01, and prints each MoE layer's max/mean
# expert load (1.0 = perfectly even, 4.0 = two experts take everything) averaged over the last 20
# steps, and the final losses.
#   bench/moe_balance.sh [BUILD_DIR] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
steps=${2:-200}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash "$root/scripts/fortunes.sh" "$build" > /dev/null
for coef in 0 0.01; do
  "$build/bin/loom" train "$root/configs/demo.toml" --run-dir "$work/aux-$coef" --set data.dir="$root/data/fortunes" \
    --set train.steps=$steps --set train.eval_every=0 --set train.sample_every=0 --set run.log_every=1000 \
    --set model.moe.experts=8 --set model.moe.top_k=2 --set model.moe.every=2 --set model.moe.dropless=true \
    --set model.moe.aux_coef=$coef > "$work/log-$coef" 2>&1 || { cat "$work/log-$coef"; exit 1; }
done
python3 - "$work" <<'PY'
import json, sys, os
work = sys.argv[1]
print("%-10s %-6s %22s %12s" % ("aux_coef", "layer", "max/mean load (last 20)", "final loss"))
for coef in ("0", "0.01"):
    rows = [json.loads(l) for l in open(os.path.join(work, "aux-" + coef, "metrics.jsonl"))]
    layers = sorted({k.split(".")[1] for k in rows[-1] if k.startswith("moe.") and k.endswith("load_max_over_mean")})
    for name in layers:
        key = "moe.%s.load_max_over_mean" % name
        tail = [r[key] for r in rows[-20:]]
        print("%-10s %-6s %22.3f %12.4f" % (coef, name, sum(tail) / len(tail), rows[-1]["loss"]))
PY
