#!/usr/bin/env bash
# How long `loom plan` takes to search every layout of a large job, against its target: Llama 3
# 405B on 1024 H100s (128 nodes), global batch 1024, beside Llama 3 8B on one node as the baseline
# search in the same script (the same code over far fewer layouts). Prints each search's wall time
# (the best of ROUNDS), the layouts costed, and the ratio to the 10 s target.
#   bench/plan_search.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
python3 - "$build/bin/loom" "$root" "$rounds" <<'PY'
import re, subprocess, sys, time
loom, root, rounds, target = sys.argv[1], sys.argv[2], int(sys.argv[3]), 10.0
cfg, cluster = f"{root}/configs/plan_llama3.toml", f"{root}/clusters/h100-sxm.toml"
searches = [("llama3-8b, 8 GPUs (baseline)", ["--nodes", "1"]),
            ("llama3-405b, 1024 GPUs", ["--nodes", "128", "--set", "model.preset=llama3-405b", "--set", "train.global_batch=1024"])]
print(f"{'search':34} {'layouts':>9} {'best':>9} {'of the 10 s target':>20}")
for label, args in searches:
    best, layouts = None, "?"
    for _ in range(rounds):
        t0 = time.monotonic()
        out = subprocess.run([loom, "plan", cfg, "--cluster", cluster, "--top", "1", *args], capture_output=True, text=True, check=True).stdout
        s = time.monotonic() - t0
        best = s if best is None else min(best, s)
        m = re.search(r"(\d+) layouts costed", out)
        layouts = m.group(1) if m else "?"
    print(f"{label:34} {layouts:>9} {best:8.2f}s {best / target:19.2f}x")
PY
