#!/usr/bin/env bash
# gloo against mpi on the same machine, one after the other in this script: `loom bench comm`
# self-launched over gloo and under mpirun over the mpi plugin, for all_reduce, all_gather,
# reduce_scatter and all_to_all at 1 MiB and 64 MiB. Prints busbw (nccl-tests factors) of each
# and the mpi/gloo ratio.
#   bench/comm_gloo_vs_mpi.sh [BUILD_DIR] [NPROC] [ITERS]
set -euo pipefail
build=${1:-build}
nproc=${2:-2}
iters=${3:-10}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
busbw() {  # busbw of the row for SIZE in bench output on stdin: the out-of-place group's, else the in-place one's
  sed 's/^\[rank [0-9]*\] //' | awk -v size="$1" '$1 == size { print ($8 == "n/a" ? $12 : $8) }'
}
printf "%-15s %10s %12s %12s %10s\n" op bytes "gloo GB/s" "mpi GB/s" "mpi/gloo"
for op in all_reduce all_gather reduce_scatter all_to_all; do
  g=$("$build/bin/loom" bench comm --op $op --min-bytes 1M --max-bytes 64M --nproc "$nproc" --iters "$iters" --warmup 3)
  m=$(mpirun -np "$nproc" --oversubscribe --mca btl self,vader,tcp "$build/bin/loom" bench comm --op $op \
        --min-bytes 1M --max-bytes 64M --comm mpi --iters "$iters" --warmup 3)
  for size in 1048576 67108864; do
    gb=$(echo "$g" | busbw $size); mb=$(echo "$m" | busbw $size)
    printf "%-15s %10s %12s %12s %10.2f\n" $op $size "$gb" "$mb" "$(python3 -c "print($mb / $gb)")"
  done
done
