#!/usr/bin/env bash
# Registers, shared memory, stack and spills of every CUDA kernel of the op table, as ptxas
# reports them (`nvcc -Xptxas -v`), for sm_80 and sm_90. Needs only the CUDA toolkit, not a GPU.
# Writes OUT/kernel_registers.txt (OUT defaults to build/bench/kernel_registers) and prints it;
# exits 1 when a kernel spills on sm_90.
#   bench/kernel_registers.sh [OUT]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build/bench/kernel_registers}
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "no nvcc: the CUDA toolkit is needed (scripts/install-deps.sh does not install it)" >&2; exit 1; }
mkdir -p "$out"
report="$out/kernel_registers.txt"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
spills=0
{
  printf '%s\n' "ptxas -v for runtime/ops/cuda/*.cu ($("$nvcc" --version | sed -n 's/^Cuda compilation tools, //p'))"
  for arch in 80 90; do
    printf '\nsm_%s\n%-58s %5s %8s %6s %12s\n' "$arch" kernel regs smem_B stack_B spill_st/ld_B
    for cu in "$root"/runtime/ops/cuda/*.cu; do
      "$nvcc" -std=c++17 -O3 -arch=sm_$arch -Xptxas -v -c "$cu" -o "$work/k.o" -I"$root/runtime" \
        -I"$root/sdk/include" > "$work/ptxas.txt" 2>&1
      # ptxas prints per entry: the mangled name, then its stack and spills, then registers and smem.
      awk '
        /Compiling entry function/ { name = $0; sub(/.*function .\x27*/, "", name); sub(/\x27.*/, "", name) }
        /bytes stack frame/ { stack = $1; st = $5; ld = $9 }
        /Used [0-9]+ registers/ {
          regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
          smem = 0; if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART); sub(/ bytes smem.*/, "", smem) }
          if (name != "") print name, regs, smem, stack, st "/" ld
          name = ""
        }' "$work/ptxas.txt" | while read -r name regs smem stack spill; do
        printf '%-58s %5s %8s %6s %12s\n' "$(c++filt "$name" | sed -E 's/\(.*//; s/^void //; s/loom::cuda:://g' | cut -c1-58)" \
          "$regs" "$smem" "$stack" "$spill"
      done
    done
  done
} > "$report"
cat "$report"
spills=$(awk '/^sm_90/ { on = 1; next } /^sm_/ { on = 0 } on && $NF ~ /\// { split($NF, s, "/"); if (s[1] + s[2] > 0) n++ } END { print n + 0 }' "$report")
echo "sm_90 kernels with spills: $spills (report in $report)"
[ "$spills" = 0 ]
