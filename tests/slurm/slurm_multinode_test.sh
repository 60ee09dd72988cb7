#!/usr/bin/env bash
# Loom under a multi-node Slurm: a 2-node scripts/local-cluster.sh cluster (network namespaces with
# their own hostnames and addresses) with slurmctld in its hub and one slurmd per node, then
#   1. `srun -N 2 -n 4`: dp 4 and dp 2 x tp 2 match the single-rank run (10 steps, 1e-5 relative),
#      MASTER_ADDR comes from SLURM_STEP_NODELIST, and rank 0 names both hosts and their eth0;
#   2. `sbatch --wait` of a batch script like docs/cluster.md's (srun inside it) trains the same;
#   3. a rank killed on node1 ends the job non-zero within 30 s, naming it, with nothing left.
# Removes the daemons and the cluster on every exit path. Prints "N passed, N failed".
#   tests/slurm/slurm_multinode_test.sh LOOM_BIN
set -uo pipefail
loom=${1:?usage: slurm_multinode_test.sh LOOM_BIN}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/loom-slurm-nodes-XXXXXX)
export LOOM_CLUSTER=sl$$
cluster() { bash "$root/scripts/local-cluster.sh" "$@"; }
source "$root/scripts/local-slurm.sh"
trap 'slurm_stop; cluster down; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM
source "$root/tests/slurm/common.sh"
if [ "$(id -u)" -ne 0 ]; then echo "SKIPPED: needs root (namespaces, and a local Slurm with auth/none)"; exit 77; fi
hub_srun() { cluster exec hub timeout -k 5 120 srun "$@"; }

tiny_config "$loom" "$work" 8
"$loom" train "$work/e.toml" --run-dir "$work/one" > "$work/one.out" 2>&1
check "single-rank reference run" test $? -eq 0

cluster up 2 > /dev/null || { failed=$((failed + 1)); finish; }
slurm_start_cluster "$work/slurm" 2 || { failed=$((failed + 1)); finish; }
check "slurm with 2 namespace nodes is up" true

compare_to_one() { same_curves "$work/one" "$work/$1" "$1 vs one rank"; }
hosts_line="hosts: node0 (eth0 10.213.0.1): ranks 0-1; node1 (eth0 10.213.0.2): ranks 2-3 (interface from route to MASTER_ADDR)"

hub_srun -N 2 -n 4 --kill-on-bad-exit=1 "$loom" train "$work/e.toml" --run-dir "$work/dp4" > "$work/dp4.out" 2>&1
check "srun -N 2 -n 4 loom train (dp 4) exits 0" test $? -eq 0
check "dp 4 over 2 nodes matches one rank" compare_to_one dp4
check "rank 0 names both hosts and their interface" grep -qF "$hosts_line" "$work/dp4.out"
hub_srun -N 2 -n 4 --kill-on-bad-exit=1 "$loom" train "$work/e.toml" --run-dir "$work/tp" --set parallel.tp=2 > "$work/tp.out" 2>&1
check "srun -N 2 -n 4 (dp 2 x tp 2) exits 0" test $? -eq 0
check "dp 2 x tp 2 over 2 nodes matches one rank" compare_to_one tp

# The batch-script pattern of docs/cluster.md, with this test's paths.
cat > "$work/job.sh" <<SH
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --output=$work/batch.out
set -euo pipefail
srun --kill-on-bad-exit=1 $loom train $work/e.toml --run-dir $work/batch
SH
cluster exec hub timeout -k 5 180 sbatch --wait "$work/job.sh" > /dev/null 2>&1
check "sbatch --wait of the batch script exits 0" test $? -eq 0
check "the batch job matches one rank" compare_to_one batch

start=$(date +%s)
hub_srun -N 2 -n 4 --kill-on-bad-exit=1 bash -c '[ "$SLURM_PROCID" = 3 ] && (sleep 3; kill -9 $$) & exec "$0" "$@"' \
  "$loom" train "$work/e.toml" --run-dir "$work/killed" --set train.steps=1000000 --set run.log_every=100000 \
  > "$work/killed.out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
tail -n 4 "$work/killed.out"
check "a rank killed on node1 ends the job non-zero" test $rc -ne 0
check "the job names task 3 on node1" grep -qE "node1: task 3" "$work/killed.out"
check "it ended within 30 s (took ${took} s)" test "$took" -lt 30
sleep 1
left() { cluster pids "$1" | xargs -r ps -o pid=,args= -p | grep -F "$work/killed"; }  # the job's processes
for node in node0 node1; do
  left "$node"
  check "no process of the job is left on $node" test -z "$(left "$node")"
done
finish
