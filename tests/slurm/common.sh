# Shared by the Slurm tests (sourced): PASS/FAIL bookkeeping, a tiny corpus and config, and the
# comparison of two runs' curves.
passed=0 failed=0
check() {  # check NAME CONDITION-COMMAND...
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "PASS: $name"; else failed=$((failed + 1)); echo "FAIL: $name"; fi
}
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }

# tiny_config LOOM WORK GLOBAL_BATCH [EXTRA_TRAIN_LINES]: a corpus in WORK/d and WORK/e.toml, 10
# steps of a 2-layer model on one thread per rank.
tiny_config() {
  local loom=$1 work=$2 batch=$3 extra=${4:-}
  for i in $(seq 0 499); do echo "srun and the local launcher train the same model $((i % 11))"; done > "$work/c.txt"
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
global_batch = $batch
eval_every = 0
$extra
TOML
}

# same_curves REF_DIR RUN_DIR NAME: every step's loss and grad norm within 1e-5 relative.
same_curves() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 10, (len(a), len(b))
worst = max(max(abs(x[k] - y[k]) / abs(x[k]) for k in ("loss", "grad_norm")) for x, y in zip(a, b))
print(f"{sys.argv[3]}: worst relative difference {worst:.2e} over 10 steps")
assert worst <= 1e-5
PY
}
