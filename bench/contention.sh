#!/usr/bin/env bash
# Sharing the cores: the demo model's step (configs/demo.toml's shape, batch 16) alone, then beside
# 1 and 2 busy processes (a shell spinning), for Loom and for PyTorch (transformers' GPT-2 of the
# same shape, bench/contention_torch.py), measured in the same run. Prints each median step and
# the slowdown against the same program alone; Loom's slowdown should be no worse than PyTorch's.
#   bench/contention.sh [BUILD_DIR] [STEPS]           (default build, 20 steps)
# LOOM_BENCH_ENV="OMP_WAIT_POLICY=active" tries another threading policy for Loom.
set -euo pipefail
build=${1:-build}
steps=${2:-20}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$(dirname "$0")/corpus.sh"
bench_workdir "$build" 20000 "the demo model trains while other processes share its cores"
python=$root/.venv/bin/python
[ -x "$python" ] || python=python3
cores=$(nproc)

cat > "$work/demo.toml" <<TOML
[run]
peak_gflops = 50
log_every = 1000
[model]
n_layer = 4
n_head = 4
d_model = 128
seq_len = 128
vocab_size = 1024
[data]
dir = "$work/data"
[train]
steps = $((steps + 3))
global_batch = 16
eval_every = 0
TOML

busy=()
start_busy() { for _ in $(seq "$1"); do sh -c 'while :; do :; done' & busy+=($!); done; }
stop_busy() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done; wait "${busy[@]}" 2>/dev/null || true; busy=(); }
trap 'stop_busy; rm -rf "$work"' EXIT

loom_step() {  # median step_ms after 3 warm-up steps
  rm -rf "$work/run"
  env ${LOOM_BENCH_ENV:-} "$build/bin/loom" train "$work/demo.toml" --run-dir "$work/run" > /dev/null
  python3 - "$work/run/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step_ms"' in l]
print(f"{statistics.median(r['step_ms'] for r in rows[3:]):.1f}")
PY
}
torch_step() { "$python" "$root/bench/contention_torch.py" "$steps" "$cores"; }

printf "%-22s %12s %10s %12s %10s %14s\n" "beside" "loom ms" "slowdown" "pytorch ms" "slowdown" "loom/pytorch"
loom0= torch0=
for n in 0 1 2; do
  start_busy "$n"
  sleep 1
  l=$(loom_step)
  t=$(torch_step)
  stop_busy
  [ -z "$loom0" ] && loom0=$l torch0=$t
  python3 - "$n" "$l" "$loom0" "$t" "$torch0" <<'PY'
import sys
n, l, l0, t, t0 = int(sys.argv[1]), *map(float, sys.argv[2:])
print(f"{str(n) + ' busy process' + ('es' if n != 1 else ''):<22} {l:12.1f} {l / l0:9.2f}x {t:12.1f} {t / t0:9.2f}x {(l / l0) / (t / t0):13.2f}")
PY
done
