#!/usr/bin/env bash
# Loom's CPU training step against PyTorch eager's, op family by op family: one fp32 step of
# GPT-2 (forward, backward, the gradient norm, AdamW) at the same shape, data size and threads
# on both sides, twice each, interleaved (absolute times drift on shared machines; the ratios are
# the figures). Loom's side is bench_cpu_profile (every op-table call timed, bench/op_profile.hpp);
# PyTorch's is bench/cpu_profile_torch.py (transformers' GPT-2 under torch.profiler). Prints, per
# shape, tokens/s both ways and their ratio, then the milliseconds per step of each op family and
# of the time outside the GEMMs, which is where the step's time beyond the GEMMs goes.
#   bench/cpu_profile.sh [BUILD_DIR] [THREADS] [STEPS]
set -euo pipefail
build=${1:-build}
threads=${2:-2}
steps=${3:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/corpus.sh"
bench_torch cpu_profile
[ -x "$build/bin/bench_cpu_profile" ] || { echo "cpu_profile: $build/bin/bench_cpu_profile is missing: build first" >&2; exit 1; }
bench_warn_busy cpu_profile
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "CPU: $cpu; $threads threads; $steps steps after one warm-up; PyTorch $("$python" -c 'import torch; print(torch.__version__)')"

run_pair() {  # run_pair L D H T B V OUT_PREFIX
  local i
  for i in 1 2; do
    "$build/bin/bench_cpu_profile" --layers "$1" --d "$2" --heads "$3" --T "$4" --batch "$5" --vocab "$6" \
      --threads "$threads" --steps "$steps" > "$7.loom$i"
    "$python" "$root/bench/cpu_profile_torch.py" "$1" "$2" "$3" "$4" "$5" "$6" "$threads" "$steps" \
      > "$7.torch$i" 2> "$7.torch_err" || { cat "$7.torch_err" >&2; exit 1; }
  done
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for shape in "4 128 4 128 16 256" "6 384 6 256 8 256"; do
  read -r L D H T B V <<< "$shape"
  echo "running L$L d$D h$H T$T B$B V$V ..." >&2
  run_pair "$L" "$D" "$H" "$T" "$B" "$V" "$work/s"
  python3 - "$work/s" "$L/$D/$H/$T/$B/$V" "$((B * T))" <<'PY'
import sys
prefix, shape, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
def read(path):
    return {k: float(v) for k, v in (line.split() for line in open(path))}
# Of the two runs each, the one with the faster step (the less disturbed).
loom = min((read(f"{prefix}.loom{i}") for i in (1, 2)), key=lambda r: r["step_ms"])
torch = min((read(f"{prefix}.torch{i}") for i in (1, 2)), key=lambda r: r["step_ms"])
print(f"\nshape L/d/h/T/B/V {shape}")
print(f"  step (no profiler)   Loom {loom['step_ms']:8.1f} ms {tokens / loom['step_ms'] * 1e3:9.0f} tok/s   "
      f"PyTorch {torch['step_ms']:8.1f} ms {tokens / torch['step_ms'] * 1e3:9.0f} tok/s   "
      f"Loom tokens/s / PyTorch's: {torch['step_ms'] / loom['step_ms']:.2f}")
print(f"  {'ms per step':22} {'Loom':>9} {'PyTorch':>9} {'Loom/PyTorch':>13}")
fams = ["gemm", "attention", "norms", "activation", "embedding", "loss", "optimizer", "elementwise+copies", "framework"]
for f in fams:
    ratio = f"{loom[f] / torch[f]:13.2f}" if torch[f] > 0.05 else f"{'-':>13}"
    print(f"  {f:22} {loom[f]:9.1f} {torch[f]:9.1f} {ratio}")
outside = {name: sum(r[f] for f in fams if f != "gemm") for name, r in (("loom", loom), ("torch", torch))}
print(f"  {'outside the GEMMs':22} {outside['loom']:9.1f} {outside['torch']:9.1f} {outside['loom'] / outside['torch']:13.2f}")
print("  (families from each side's profiled run: PyTorch's include torch.profiler's cost, mostly in framework;")
print("   PyTorch's linear layers add their bias inside addmm (gemm), Loom's in bias_add (elementwise+copies))")
PY
done
