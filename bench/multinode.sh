#!/usr/bin/env bash
# all_reduce busbw of 64 MiB between 2 ranks on one namespace node and between 2 ranks on two
# namespace nodes (scripts/local-cluster.sh), over gloo and over mpi, side by side, with the
# ratio across/within. Optionally again with one node's link limited by tc tbf.
#   bench/multinode.sh [BUILD_DIR] [RATE]      e.g. bench/multinode.sh build 1gbit
# Within a node the ranks talk over that node's loopback (gloo) or shared memory (Open MPI's
# vader); across nodes over the veth pair and bridge, which cost a copy and a softirq each way.
# Needs root. The cluster is named "loombench" and removed on exit.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
rate=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
export LOOM_CLUSTER=loombench
cluster() { bash "$root/scripts/local-cluster.sh" "$@"; }
trap 'cluster down' EXIT
cluster up 2 >&2
loom=$build/bin/loom
size=64M
bench_args="comm --op all_reduce --min-bytes $size --max-bytes $size --iters 10 --warmup 3"
busbw() { awk '/Avg bus bandwidth/ {print $(NF - 1); exit}'; }
mpirun_on() {  # HOSTS (Open MPI --host syntax) ARGS...
  local hosts=$1; shift
  cluster exec hub env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --host "$hosts" -np 2 \
    --mca plm_rsh_agent "bash $root/scripts/local-cluster.sh rsh" --mca btl self,vader,tcp \
    --mca btl_tcp_if_include 10.213.0.0/24 --mca oob_tcp_if_include 10.213.0.0/24 "$@"
}
gloo_within() { cluster exec node0 "$loom" bench $bench_args --nproc 2 --comm gloo | busbw; }
gloo_across() {
  local k
  for k in 1 0; do
    cluster exec "node$k" env MASTER_ADDR=node0 MASTER_PORT=29410 "$loom" bench $bench_args --nproc 1 --comm gloo \
      --nnodes 2 --node-rank "$k" > "/tmp/loombench.node$k" 2>&1 &
  done
  wait
  busbw < /tmp/loombench.node0
}
mpi_within() { mpirun_on node0:2 "$loom" bench $bench_args --comm mpi | busbw; }
mpi_across() { mpirun_on node0:1,node1:1 "$loom" bench $bench_args --comm mpi | busbw; }

row() {  # LABEL
  local gw ga mw ma
  gw=$(gloo_within); ga=$(gloo_across); mw=$(mpi_within); ma=$(mpi_across)
  printf '%-22s %10s %10s %7s   %10s %10s %7s\n' "$1" "$gw" "$ga" "$(awk "BEGIN {printf \"%.2f\", $ga / $gw}")" \
    "$mw" "$ma" "$(awk "BEGIN {printf \"%.2f\", $ma / $mw}")"
}
echo "all_reduce $size, 2 ranks, busbw in GB/s (loom bench comm)"
printf '%-22s %10s %10s %7s   %10s %10s %7s\n' "" "gloo 1 node" "2 nodes" "ratio" "mpi 1 node" "2 nodes" "ratio"
row "plain links"
if [ -n "$rate" ]; then
  cluster rate node1 "$rate"
  row "node1 at $rate"
fi
