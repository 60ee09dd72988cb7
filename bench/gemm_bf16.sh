#!/usr/bin/env bash
# bf16 GEMMs on this CPU (issue #53: measure the candidates, choose with numbers): one GPT block's
# GEMMs, forward and backward, through Loom's fp32 GEMM and oneDNN's bf16 matmul
# (bench_gemm_bf16), and PyTorch's bf16 and fp32 matmuls on the same shapes in the same script,
# the baseline. Prints each side's total and the ratios.
#   bench/gemm_bf16.sh [BUILD_DIR] [THREADS] [D] [TOKENS]
set -euo pipefail
build=${1:-build}
threads=${2:-2}
d=${3:-384}
tokens=${4:-2048}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/corpus.sh"
bench_torch gemm_bf16
bench_warn_busy gemm_bf16
lscpu | grep -E "Model name|Flags" | sed -E 's/^(Flags:).*/\1 '"$(lscpu | grep -o -E 'amx_bf16|avx512_bf16' | sort -u | tr '\n' ' ')"'/'
loom_out=$("$build/bin/bench_gemm_bf16" --threads "$threads" --d "$d" --tokens "$tokens")
echo "$loom_out"
"$python" - "$threads" "$loom_out" <<'PY'
import re, sys, time, torch
threads, loom = int(sys.argv[1]), sys.argv[2]
torch.set_num_threads(threads)
# The shapes bench_gemm_bf16 ran (bench/gemm_shapes.hpp), from its rows: "  NT  2048  1152   384 ...".
shapes = [(a == "T", b == "T", int(M), int(N), int(K))
          for a, b, M, N, K in re.findall(r"^\s+([NT])([NT])\s+(\d+)\s+(\d+)\s+(\d+)\s", loom, re.M)]
assert shapes, "no GEMM rows in bench_gemm_bf16's output"
def best(f):
    for _ in range(3): f()
    b = 1e30
    for _ in range(15):
        t0 = time.perf_counter(); f(); b = min(b, time.perf_counter() - t0)
    return b
total = {torch.float32: 0.0, torch.bfloat16: 0.0}
for ta, tb, M, N, K in shapes:
    for dt in total:
        a = torch.full((K, M) if ta else (M, K), 0.5, dtype=dt)
        b = torch.full((N, K) if tb else (K, N), 0.25, dtype=dt)
        A, B = (a.t() if ta else a), (b.t() if tb else b)
        total[dt] += best(lambda: torch.matmul(A, B))
m = re.search(r"fp32 Loom ([\d.]+) ms, bf16 oneDNN ([\d.]+) ms", loom)
loom32, dnnl16 = float(m.group(1)), float(m.group(2))
t32, t16 = total[torch.float32] * 1e3, total[torch.bfloat16] * 1e3
print(f"PyTorch {torch.__version__}: fp32 {t32:.2f} ms, bf16 {t16:.2f} ms ({threads} threads)")
print(f"bf16 over fp32: oneDNN/Loom {dnnl16 / loom32:.2f}, PyTorch {t16 / t32:.2f}")
print(f"oneDNN bf16 time / PyTorch bf16's: {dnnl16 / t16:.2f}; Loom fp32 / PyTorch fp32: {loom32 / t32:.2f}")
PY
