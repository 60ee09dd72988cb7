#!/usr/bin/env bash
# bf16 on the CPU against fp32, and against PyTorch's CPU bf16 autocast, in one script (absolute
# times drift on shared machines; the ratios are the figures). Issue #53's acceptance:
#   - per shape (L4 d128 T128 B16 and L6 d384 T256 B8, GPT-2, byte vocabulary): Loom's bf16 step
#     over its fp32 step (goal <= 0.7); Loom's bf16 tokens/s over PyTorch autocast's (goal >= 1);
#     the bf16 run's peak activation memory over the fp32 run's (goal <= 0.55), both measured as
#     metrics.jsonl's activation_peak_bytes (the tensors' peak from the first forward on, less the
#     model state: parameters, gradients, optimizer state, comm buffers);
#   - tracking: TRACK_STEPS steps of the small shape in fp32 and bf16 on the same corpus, on each
#     side; the mean |loss_bf16 - loss_fp32| over steps 100 to TRACK_STEPS, Loom's over PyTorch's
#     (goal <= 1.5).
# Loom's two precisions run interleaved, twice each, and the faster run of each is kept.
#   bench/bf16_step.sh [BUILD_DIR] [THREADS] [STEPS] [TRACK_STEPS]
set -euo pipefail
build=${1:-build}
threads=${2:-2}
steps=${3:-12}
track_steps=${4:-300}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/corpus.sh"
bench_torch bf16_step
[ -x "$build/bin/loom" ] || { echo "bf16_step: $build/bin/loom is missing: build first" >&2; exit 1; }
bench_warn_busy bf16_step
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1); $threads threads; PyTorch $("$python" -c 'import torch; print(torch.__version__)')"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work/corpus.txt" <<'PY'
import random, sys
random.seed(1234)
syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "de", "po", "an", "el", "or", "us"]
words = ["".join(random.choice(syllables) for _ in range(random.randint(1, 3))) for _ in range(300)]
lines = []
for _ in range(40000):
    n = random.randint(4, 12)
    lines.append(" ".join(random.choice(words[: random.randint(20, 300)]) for _ in range(n)) + ".")
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
"$build/bin/loom" data prepare --text "$work/corpus.txt" --out "$work/data" --val-fraction 0.05 > /dev/null
cat > "$work/base.toml" <<EOF
[run]
threads = $threads
log_every = 1000
[model]
vocab_size = 256
[data]
dir = "$work/data"
[train]
lr = 2e-3
warmup_steps = 30
eval_every = 0
sample_every = 0
EOF
bf16_line=$("$build/bin/loom" train "$work/base.toml" --run-dir "$work/probe" --set plugins.precision=bf16 \
  --set train.steps=1 --set train.global_batch=1 --set model.seq_len=16 --set model.n_layer=1 \
  --set model.n_head=1 --set model.d_model=16 | grep '^precision:' || true)
echo "Loom: $bf16_line"

loom_run() {  # loom_run RUN_DIR PRECISION L D H T B STEPS
  "$build/bin/loom" train "$work/base.toml" --run-dir "$1" --set plugins.precision="$2" \
    --set model.n_layer="$3" --set model.d_model="$4" --set model.n_head="$5" \
    --set model.seq_len="$6" --set train.global_batch="$7" --set train.steps="$8" > "$1.log"
}

for shape in "4 128 4 128 16" "6 384 6 256 8"; do
  read -r L D H T B <<< "$shape"
  echo "running L$L d$D h$H T$T B$B ..." >&2
  for i in 1 2; do
    for p in fp32 bf16; do loom_run "$work/s$L-$p-$i" "$p" "$L" "$D" "$H" "$T" "$B" "$steps"; done
  done
  "$python" "$root/bench/bf16_torch.py" speed "$L" "$D" "$H" "$T" "$B" 256 "$threads" "$steps" > "$work/torch$L"
  python3 "$root/bench/bf16_report.py" speed "$work" "$L" "$((B * T))"
done

echo "running $track_steps steps of L4 d128 in fp32 and bf16 on both sides ..." >&2
for p in fp32 bf16; do loom_run "$work/t-$p" "$p" 4 128 4 128 16 "$track_steps"; done
"$python" "$root/bench/bf16_torch.py" track 4 128 4 128 16 256 "$threads" "$track_steps" "$work/corpus.txt" > "$work/torch_track"
python3 "$root/bench/bf16_report.py" track "$work" "$track_steps"
