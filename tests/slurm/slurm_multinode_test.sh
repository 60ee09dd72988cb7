#!/usr/bin/env bash
# Loom under a multi-node Slurm: a 2-node scripts/local-cluster.sh cluster (network namespaces with
# their own hostnames and addresses) with slurmctld in its hub and one slurmd per node, then
#   1. `srun -N 2 -n 4`: dp 4 and dp 2 x tp 2 match the single-rank run (10 steps, 1e-5 relative),
#      MASTER_ADDR comes from SLURM_STEP_NODELIST, and rank 0 names both hosts and their eth0;
#   2. `sbatch --wait` of a batch script like docs/cluster.md's (srun inside it) trains the same;
#   3. a Slurm heterogeneous job of two components runs the planner's layout for a mixed cluster
#      as the local launcher does, and a component of the wrong node count is refused by name;
#   4. a rank killed on node1 ends the job non-zero within 30 s, naming it, with nothing left.
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

# A mixed cluster as a Slurm heterogeneous job: component k runs [parallel] groups' group k. The
# planner's layout for clusters/this-machine-halved.toml (its uneven split, its group order)
# under `sbatch` with two components, against the same config under the local launcher.
python3 - "$work/e.toml" <<'PY'
import sys
p = sys.argv[1]
t = open(p).read().replace("n_layer = 2", "n_layer = 6")
open(p.replace("e.toml", "six.toml"), "w").write(t)
PY
"$loom" plan "$work/six.toml" --cluster "$root/clusters/this-machine-halved.toml" --emit 1 --out "$work/mixed.toml" > "$work/plan.out" 2>&1
check "loom plan --emit on the mixed cluster file" grep -q "wrote $work/mixed.toml" "$work/plan.out"
mixed_local() {  # the local launcher on both nodes, node0 hosting the store
  local k pids=
  for k in 1 0; do
    cluster exec "node$k" env MASTER_ADDR=node0 MASTER_PORT=29470 timeout -k 5 120 "$loom" train "$work/mixed.toml" \
      --run-dir "$work/mixed_local" --nnodes 2 --node-rank "$k" > "$work/mixed_local.node$k.out" 2>&1 &
    pids="$pids $!"
  done
  wait $pids  # not a bare wait: the Slurm daemons are this shell's children too
}
mixed_local
check "the mixed layout trains under the local launcher" grep -q "done: 10 steps" "$work/mixed_local.node0.out"
het_script() {  # het_script NAME NODES0 NODES1 CONFIG
  cat > "$work/$1.sh" <<SH
#!/bin/bash
#SBATCH --nodes=$2 --ntasks-per-node=1
#SBATCH --output=$work/$1.out
#SBATCH hetjob
#SBATCH --nodes=$3 --ntasks-per-node=1
srun --het-group=0,1 --kill-on-bad-exit=1 $loom train $4 --run-dir $work/$1
SH
}
het_script het 1 1 "$work/mixed.toml"
cluster exec hub timeout -k 5 180 sbatch --wait "$work/het.sh" > /dev/null 2>&1
check "sbatch --wait of a two-component het job exits 0" test $? -eq 0
check "the het job matches the local launcher" same_curves "$work/mixed_local" "$work/het" "het job vs local launcher"
order=$(grep -o "groups: .*" "$work/mixed_local.node0.out" | head -n 1)
check "component k runs group k, as under the local launcher ($order)" grep -qF "$order" "$work/het.out"
# The first group asks for 2 nodes; the job's first component has 1.
sed 's/^groups = \[ '"'"'\([a-z]*\) nodes=1'"'"'/groups = [ '"'"'\1 nodes=2'"'"'/' "$work/mixed.toml" > "$work/wrong.toml"
het_script wrong 1 1 "$work/wrong.toml"
cluster exec hub timeout -k 5 180 sbatch --wait "$work/wrong.sh" > /dev/null 2>&1
check "a het component with the wrong node count fails the job" test $? -ne 0
check "its tasks exit 2, a config error" grep -q "Exited with exit code 2" "$work/wrong.out"
check "it names the component and the group" grep -qE "Slurm het component 0 has 1 node; group '[a-z]+' \(\[parallel\] groups\[0\]\) has nodes=2" "$work/wrong.out"

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
