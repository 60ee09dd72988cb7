#!/usr/bin/env bash
# The element-wise kernels at 256-bit and 512-bit vectors (GCC's -mprefer-vector-width, which
# runtime/CMakeLists.txt sets to 512 for them): GELU forward and backward on bf16 storage, both
# widths built and run in the same script, interleaved, with the build's flags otherwise.
#   bench/vector_width.sh [THREADS]
set -euo pipefail
threads=${1:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/corpus.sh"
bench_warn_busy vector_width
grep -q avx512f /proc/cpuinfo || echo "vector_width: this CPU has no AVX-512: both builds are the same" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for w in 256 512; do
  "${CXX:-c++}" -std=c++20 -O3 -DNDEBUG -march=native -mprefer-vector-width=$w -fno-math-errno \
    -fno-trapping-math -fopenmp -I"$root/runtime" -I"$root/sdk/include" \
    "$root/bench/vector_width.cpp" "$root/runtime/ops/cpu/activations.cpp" -o "$work/w$w"
done
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1); $threads threads"
for i in 1 2; do
  for w in 256 512; do OMP_NUM_THREADS=$threads "$work/w$w" > "$work/r$w.$i"; done
done
python3 - "$work" <<'PY'
import sys
d = sys.argv[1]
best = {w: [min(float(open(f"{d}/r{w}.{i}").read().split()[k]) for i in (1, 2)) for k in (0, 1)]
        for w in (256, 512)}
for k, name in enumerate(("GELU forward", "GELU backward")):
    a, b = best[256][k], best[512][k]
    print(f"{name:14} 256-bit {a:7.2f} ms   512-bit {b:7.2f} ms   256 / 512: {a / b:.2f}")
PY
