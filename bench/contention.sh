#!/usr/bin/env bash
# Sharing the cores: the demo model's step (configs/demo.toml's shape, batch 16) alone, then beside
# 1 and 2 busy processes (a shell spinning) and beside bursty load (a process busy and idle in
# turns of 20-200 ms), for Loom and for PyTorch (transformers' GPT-2 of the same shape,
# bench/contention_torch.py), measured in the same run. Prints each median step, the slowdown
# against the same program alone, and the slowest step over the median (steadiness). Targets
# (docs/training.md): <= 2.0x beside one busy process, max/median <= 1.5 beside bursty load, and
# never slower than PyTorch in absolute time.
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
$(bench_demo_model "$work")
[train]
steps = $((steps + 3))
global_batch = 16
eval_every = 0
TOML

start_bursty() {
  python3 -c '
import random, time
random.seed(7)
while True:
    end = time.time() + random.uniform(0.02, 0.2)
    while time.time() < end:
        pass
    time.sleep(random.uniform(0.02, 0.2))' &
  busy+=($!)
}
trap 'stop_busy; rm -rf "$work"' EXIT

loom_step() {  # median step_ms after 3 warm-up steps, and max / median
  rm -rf "$work/run"
  env ${LOOM_BENCH_ENV:-} "$build/bin/loom" train "$work/demo.toml" --run-dir "$work/run" > /dev/null
  python3 - "$work/run/metrics.jsonl" <<'PY'
import json, statistics, sys
ms = [json.loads(l)["step_ms"] for l in open(sys.argv[1]) if '"step_ms"' in l][3:]
print(f"{statistics.median(ms):.1f} {max(ms) / statistics.median(ms):.2f}")
PY
}
torch_step() { "$python" "$root/bench/contention_torch.py" "$steps" "$cores"; }

printf "%-22s %12s %10s %9s %12s %10s %9s %14s\n" "beside" "loom ms" "slowdown" "max/med" "pytorch ms" "slowdown" \
  "max/med" "loom/pytorch"
loom0= torch0=
for load in 0 1 2 bursty; do
  if [ "$load" = bursty ]; then start_bursty; else start_busy "$load"; fi
  sleep 1
  read -r l lsteady < <(loom_step)
  read -r t tsteady < <(torch_step)
  stop_busy
  [ -z "$loom0" ] && loom0=$l torch0=$t
  python3 - "$load" "$l" "$loom0" "$lsteady" "$t" "$torch0" "$tsteady" <<'PY'
import sys
load, (l, l0, ls, t, t0, ts) = sys.argv[1], map(float, sys.argv[2:])
what = "bursty load" if load == "bursty" else f"{load} busy process" + ("es" if load != "1" else "")
print(f"{what:<22} {l:12.1f} {l / l0:9.2f}x {ls:9.2f} {t:12.1f} {t / t0:9.2f}x {ts:9.2f} {l / t:13.2f}")
PY
done
