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
passed=0 failed=0
check() {  # check NAME CONDITION-COMMAND...
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "PASS: $name"; else failed=$((failed + 1)); echo "FAIL: $name"; fi
}
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }

# Exit 77 (ctest: skipped, never passed) where a local Slurm cannot run; CI runs as root.
if [ "$(id -u)" -ne 0 ]; then echo "SKIPPED: needs root (a local Slurm with auth/none runs jobs as root)"; exit 77; fi
for tool in slurmctld slurmd srun sinfo; do
  command -v $tool > /dev/null || { echo "$tool not found: run scripts/install-deps.sh"; failed=1; finish; }
done

python3 - "$work/c.txt" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(500):
        f.write(f"srun and the local launcher train the same model {i % 11}\n")
PY
"$loom" data prepare --text "$work/c.txt" --out "$work/d" > /dev/null
cat > "$work/e.toml" <<TOML
[run]
threads = 1
peak_gflops = 10
[model]
n_layer = 2
n_head = 4
d_model = 32
d_ff = 64
seq_len = 16
[data]
dir = "$work/d"
[train]
steps = 10
global_batch = 4
lr = 3e-3
warmup_steps = 2
eval_every = 0
TOML

"$loom" train "$work/e.toml" --run-dir "$work/self" --set parallel.nproc=2 > "$work/self.out" 2>&1
check "self-launched 2-rank run" test $? -eq 0

slurm_start "$work/slurm" || { failed=$((failed + 1)); finish; }
check "local slurm is up" true

run_srun -n 2 --kill-on-bad-exit=1 "$loom" train "$work/e.toml" --run-dir "$work/srun" > "$work/srun.out" 2>&1
rc=$?
check "srun -n 2 loom train exits 0" test $rc -eq 0
check "rank 0 knew it was launched by slurm" grep -q "2 ranks (launched by slurm)" "$work/srun.out"
# Every step's loss and grad norm of run DIR against the self-launched run, to 1e-5 relative.
compare_to_self() {
  python3 - "$work/self/metrics.jsonl" "$work/$1/metrics.jsonl" "$1" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 10, (len(a), len(b))
worst = max(max(abs(x[k] - y[k]) / abs(x[k]) for k in ("loss", "grad_norm")) for x, y in zip(a, b))
print(f"{sys.argv[3]} vs self-launched: worst relative difference {worst:.2e} over 10 steps")
assert worst <= 1e-5
PY
}
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
