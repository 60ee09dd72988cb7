#!/usr/bin/env bash
# The demo model trained in fp32, bf16, fp16 and fp8 (one rank, same seed, same data), one run
# after another in this script: prints each precision's final validation loss and its ratio to
# fp32's (goal: bf16 and fp16 within 2%, fp8 within 5%), the mean step time ratio to fp32 (the
# cost of emulating the casts on a CPU), and draws the validation curves into an SVG. Writes only
# under OUT (default build/bench/precision_curves): the runs, and precision_curves.svg, which
# docs/precision.md shows when copied to docs/precision_curves.svg.
#   bench/precision_curves.sh [BUILD_DIR] [STEPS] [OUT]
# Needs the demo corpus (./scripts/demo.sh prepares data/fortunes on its first run).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
steps=${2:-300}
out=${3:-$build/bench/precision_curves}
cd "$root"
[ -f data/fortunes/train_000000.bin ] || { echo "no data/fortunes: run ./scripts/demo.sh --set train.steps=1 once"; exit 2; }
mkdir -p "$out"
for p in fp32 bf16 fp16 fp8; do
  echo "== $p: $steps steps"
  "$build/bin/loom" train configs/demo.toml --run-dir "$out/$p" --set plugins.precision=$p \
    --set train.steps="$steps" --set train.eval_every=25 --set train.sample_every=0 \
    --set run.log_every=50 | grep -E "^step|skipped"
done
python3 "$root/bench/plot_curves.py" "$out/precision_curves.svg" "$out"/fp32 "$out"/bf16 "$out"/fp16 "$out"/fp8
