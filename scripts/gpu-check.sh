#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, (1) the CUDA op tests against the CPU ops, (2)
# 30 steps of GPT-2 small (124M) in bf16 with tokens/s and MFU, (3) the NCCL plugin's one-rank
# bench as a smoke test. Uses the bundle from scripts/gpu-bundle.sh when .gpu/ exists (a machine
# without Loom's dependencies), otherwise builds with CUDA here. Under 8 minutes on one H100/H200.
#   scripts/gpu-check.sh [OUT_DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-$root/runs/gpu-check}}
mkdir -p "$out"
if [ -d "$root/.gpu" ]; then
  bin=$root/.gpu/bin data=$root/.gpu/data
  cuda_libs=$(find /usr/local/cuda/lib64 /usr/local/lib/python3*/dist-packages/nvidia /usr/lib/python3*/site-packages/nvidia \
    -maxdepth 2 -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
  export LD_LIBRARY_PATH=$root/.gpu/lib:$cuda_libs${LD_LIBRARY_PATH:-}
  export LOOM_PLUGIN_PATH=$root/.gpu/lib/loom/plugins
else
  cmake -S "$root" -B "$root/build-gpu" -DLOOM_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release > "$out/configure.log" &&
    cmake --build "$root/build-gpu" -j"$(nproc)" > "$out/build.log" || { tail -30 "$out/build.log"; exit 1; }
  bin=$root/build-gpu/bin
  bash "$root/scripts/fortunes.sh" "$root/build-gpu" > /dev/null
  data=$root/data/fortunes
fi
nvidia-smi -L || true
status=0
echo "== 1. CUDA op tests (each against the CPU op on the same inputs)"
"$bin/cuda_tests" 2>&1 | tee "$out/cuda_tests.log" || status=1
echo "== 2. GPT-2 small, 30 steps, bf16"
timeout 300 "$bin/loom" train "$root/configs/gpt2_gpu.toml" --set data.dir="$data" --set checkpoint.every=0 --run-dir "$out/gpt2" 2>&1 |
  tee "$out/gpt2.log" || status=1
python3 - "$out/gpt2/metrics.jsonl" <<'PY' || status=1
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steady = rows[5:] or rows
print("steps %d | median %.1f ms/step | %.0f tokens/s | MFU %.2f%% (of 989 TFLOP/s) | device peak %.2f GiB | host waits/step %d" % (
    len(rows), statistics.median(r["step_ms"] for r in steady), statistics.median(r["tokens_per_s"] for r in steady),
    100 * statistics.median(r["mfu"] for r in steady), rows[-1].get("device_peak_bytes", 0) / 2**30,
    rows[-1].get("host_waits", -1)))
PY
echo "== 3. NCCL, one rank"
timeout 120 "$bin/loom" bench comm --comm nccl --nproc 1 --max-bytes 64M 2>&1 | tee "$out/nccl.log" || status=1
exit $status
