# Sourced by the bench scripts: their shared pieces. First, a synthetic corpus of LINES lines, 12 words each, cycling through
# the words of SENTENCE, tokenised into WORK/data. Benches measure speed, so the text only has to
# be long enough and the same every run.
#   bench_corpus BUILD_DIR WORK LINES "SENTENCE"
bench_corpus() {
  local build=$1 work=$2 lines=$3 sentence=$4
  python3 - "$work/corpus.txt" "$lines" "$sentence" <<'PY'
import sys
path, lines, words = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
with open(path, "w") as f:
    for i in range(lines):
        f.write(" ".join(words[(i * 7 + j) % len(words)] for j in range(12)) + "\n")
PY
  "$build/bin/loom" data prepare --text "$work/corpus.txt" --out "$work/data" > /dev/null
}

# A temporary directory in $work, removed when the script exits, holding the corpus above.
#   bench_workdir BUILD_DIR LINES "SENTENCE"
bench_workdir() {
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  bench_corpus "$1" "$work" "$2" "$3"
}

# The [run] section every bench config starts with: one thread per rank, a fixed MFU peak, quiet.
bench_run_section() {
  printf '[run]\nthreads = 1\npeak_gflops = 50\nlog_every = 1000\n'
}

# The demo model's [model] section (configs/demo.toml's shape) and its [data] in WORK.
bench_demo_model() {
  printf '[model]\nn_layer = 4\nn_head = 4\nd_model = 128\nseq_len = 128\nvocab_size = 1024\n[data]\ndir = "%s/data"\n' "$1"
}

# PyPI's PyTorch and transformers in .venv-bench (Debian's 1.13 is a generic build), the
# baseline of the benches that compare with PyTorch: sets $python, or exits naming the install.
#   bench_torch NAME
bench_torch() {
  python=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv-bench/bin/python
  "$python" -c 'import torch, transformers' 2>/dev/null ||
    { echo "$1: the PyTorch baseline is missing: run scripts/install-deps.sh --bench" >&2; exit 1; }
}

# A warning when other loom, ctest or compiler processes share the machine with a timing.
#   bench_warn_busy NAME
bench_warn_busy() {
  local n
  n=$(pgrep -c -f 'bin/loom |cc1plus|ctest' || true)
  [ "$n" -gt 0 ] && echo "$1: warning: $n loom, ctest or compiler processes are running; the figures will be noisy" >&2
  return 0
}

# Processes that keep cores busy beside a measurement: start_busy N spins N shells; stop_busy ends them.
busy=()
start_busy() { for _ in $(seq "$1"); do sh -c 'while :; do :; done' & busy+=($!); done; }
stop_busy() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done; wait "${busy[@]}" 2>/dev/null || true; busy=(); }
