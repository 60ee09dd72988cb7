#!/usr/bin/env bash
# Loom under a real Slurm: starts a single-node slurmctld + slurmd on 127.0.0.1 (auth/none, no
# cgroups, state in a temporary directory), then
#   1. trains 2 ranks with `srun -n 2 loom train` and checks every step's loss and grad norm
#      against the same run self-launched (`[parallel] nproc = 2`), to 1e-5 relative;
#   2. kills rank 1 of a long srun job and checks the job ends non-zero within 30 s, naming
#      task 1, with no loom process left.
# Stops both daemons by their PIDs on every exit path. Prints "N passed, N failed".
#   tests/slurm/slurm_test.sh LOOM_BIN
set -uo pipefail
loom=${1:?usage: slurm_test.sh LOOM_BIN}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/loom-slurm-XXXXXX)
source "$root/scripts/local-slurm.sh"
trap 'slurm_stop; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM  # through the EXIT trap
# Every job step gets its own store port (two CI runs on one host share fresh job ids), and no
# srun may outlive its budget.
run_srun() { MASTER_PORT=$(slurm_free_ports 1) timeout -k 5 120 srun "$@"; }
source "$root/tests/slurm/common.sh"

# Exit 77 (ctest: skipped, never passed) where a local Slurm cannot run; CI runs as root.
if [ "$(id -u)" -ne 0 ]; then echo "SKIPPED: needs root (a local Slurm with auth/none runs jobs as root)"; exit 77; fi
for tool in slurmctld slurmd srun sinfo; do
  command -v $tool > /dev/null || { echo "$tool not found: run scripts/install-deps.sh"; failed=1; finish; }
done

tiny_config "$loom" "$work" 4 $'lr = 3e-3\nwarmup_steps = 2'

"$loom" train "$work/e.toml" --run-dir "$work/self" --set parallel.nproc=2 > "$work/self.out" 2>&1
check "self-launched 2-rank run" test $? -eq 0

slurm_start "$work/slurm" || { failed=$((failed + 1)); finish; }
check "local slurm is up" true

run_srun -n 2 --kill-on-bad-exit=1 "$loom" train "$work/e.toml" --run-dir "$work/srun" > "$work/srun.out" 2>&1
rc=$?
check "srun -n 2 loom train exits 0" test $rc -eq 0
check "rank 0 knew it was launched by slurm" grep -q "2 ranks (launched by slurm)" "$work/srun.out"
compare_to_self() { same_curves "$work/self" "$work/$1" "$1 vs self-launched"; }
check "srun losses and grad norms match the self-launched run (1e-5)" compare_to_self srun

# The mpi plugin under srun: Open MPI joins through Slurm's PMIx, no mpirun involved.
run_srun --mpi=pmix -n 2 --kill-on-bad-exit=1 "$loom" train "$work/e.toml" --run-dir "$work/srun-mpi" \
  --set plugins.comm=mpi > "$work/srun-mpi.out" 2>&1
check "srun --mpi=pmix -n 2 loom train (comm = mpi) exits 0" test $? -eq 0
check "srun + mpi matches the self-launched run (1e-5)" compare_to_self srun-mpi

# A rank that dies: task 1 kills itself after 2 s of a long run.
start=$(date +%s)
run_srun -n 2 --kill-on-bad-exit=1 bash -c '[ "$SLURM_PROCID" = 1 ] && (sleep 2; kill -9 $$) & exec "$0" "$@"' \
  "$loom" train "$work/e.toml" --run-dir "$work/killed" --set train.steps=1000000 --set run.log_every=100000 \
  > "$work/killed.out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
cat "$work/killed.out" | tail -n 5
check "a killed rank ends the srun job non-zero" test $rc -ne 0
check "the job names task 1" grep -qE "task 1|rank 1" "$work/killed.out"
check "it ended within 30 s (took ${took} s)" test "$took" -lt 30
sleep 1
check "no loom process is left" bash -c "! pgrep -f '$work/[k]illed'"
finish
