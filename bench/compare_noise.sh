#!/usr/bin/env bash
# Does `loom compare` tell a real difference from noise on a loaded machine? Three comparisons of
# the same small model, each in interleaved rounds (A B B A ...):
#   1. A against itself (5 rounds), with a busy process started beside it halfway through:
#      the verdict must be "no difference".
#   2. A against a B that sleeps 15% of each step ([faults] slow_step = 0.15), 5 rounds: B must be
#      found slower, with an interval that contains 15%.
#   3. A against B at 2%, 3 rounds: unless the machine is very quiet, more rounds are needed.
# The baseline is A itself, in the same rounds, so machine drift cancels.
#   bench/compare_noise.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-30}
source "$(dirname "$0")/corpus.sh"
bench_workdir "$build" 20000 "a real difference stands out from the noise of a shared machine"
bench_run_section > "$work/a.toml"
cat >> "$work/a.toml" <<TOML
[model]
n_layer = 4
n_head = 4
d_model = 128
seq_len = 64
[data]
dir = "$work/data"
[train]
steps = $steps
global_batch = 8
eval_every = 0
TOML
{ cat "$work/a.toml"; printf '[faults]\nslow_step = 0.15\n'; } > "$work/slow15.toml"
{ cat "$work/a.toml"; printf '[faults]\nslow_step = 0.02\n'; } > "$work/slow2.toml"

verdict() {  # verdict NAME ARGS...: run loom compare, print its rounds summary
  local name=$1
  shift
  "$build/bin/loom" compare "$@" --out "$work/$name" > "$work/$name.log"
  echo "== $name"
  sed -n '/^over all rounds/,/^report:/p' "$work/$name.log" | grep -v '^report:'
}

# 1. A/A with a busy process from halfway: one A/A round takes about 2 x steps x 50 ms here.
half=$(python3 -c "print(max(1, int(5 * 2 * $steps * 0.05 / 2)))")
( sleep "$half"; timeout 600 sh -c 'while :; do :; done' ) &
busy=$!
verdict a-vs-a-loaded "$work/a.toml" "$work/a.toml" --rounds 5
kill "$busy" 2>/dev/null || true
pkill -f 'while :; do :; done' 2>/dev/null || true
verdict a-vs-slow15 "$work/a.toml" "$work/slow15.toml" --rounds 5
verdict a-vs-slow2 "$work/a.toml" "$work/slow2.toml" --rounds 3
