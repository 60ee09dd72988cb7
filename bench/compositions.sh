#!/usr/bin/env bash
# The composition matrix: every pair of {ddp, zero1, zero2, zero3, tp, tp+sp, cp, ep, pp 1f1b,
# pp interleaved, recompute full, recompute selective, bf16, fp16, fp8, async checkpoint}, and
# the triples users run (dp x tp x pp, dp x cp x tp, ep x dp x tp), each trained on llama-tiny
# (with ep: a MoE llama-tiny, every second block 4 experts, top 2, capacity dropping) and compared
# step by step with the single-rank run of the same model and precision. Prints a Markdown table for
# docs/architecture.md: the worst relative difference of loss and grad norm over the steps, or
# why the cell cannot exist. A cell passes within 1e-5 (fp32) or 2e-4 (bf16, fp16, fp8: a layout
# changes the summation order, and an operand near a rounding boundary may round the other way).
#   bench/compositions.sh [BUILD_DIR] [STEPS] [CELLS] [strict]   (CELLS: "all" or a regex of cell names)
# With "strict", each cell (the single items too) trains on the strict emulated device and is
# compared with the same cell on the CPU: it passes only when equal bit for bit (docs/cuda.md).
set -euo pipefail
build=${1:-build}
steps=${2:-6}
only=${3:-all}
against=${4:-}
source "$(dirname "$0")/corpus.sh"
bench_workdir "$build" 4000 "every layout and every composition of strategies trains the same model"
model_file() {  # model_file NAME MODEL_LINES
  { bench_run_section; printf '[model]\npreset = "llama-tiny"\nseq_len = 16\n%s\n' "$2"
    printf '[data]\ndir = "%s"\n[train]\nsteps = %s\nglobal_batch = 8\nlr = 1e-3\nwarmup_steps = 2\neval_every = 0\n' \
      "$work/data" "$steps"; } > "$work/$1.toml"
}
model_file dense ""
model_file moe "moe = { experts = 4, top_k = 2, every = 2, capacity_factor = 1.0, aux_coef = 0.01, z_coef = 0.001 }"

# Each item: its slot (two items of one slot cannot compose: the slot holds one plugin), the
# ranks it multiplies the world by, and its settings.
declare -A slot ranks sets
item() { slot[$1]=$2; ranks[$1]=$3; sets[$1]=$4; }
item ddp data 2 "--set plugins.data=ddp"
item zero1 data 2 "--set plugins.data=zero1"
item zero2 data 2 "--set plugins.data=zero2"
item zero3 data 2 "--set plugins.data=zero3"
item tp tp 2 "--set parallel.tp=2"
item tp+sp tp 2 "--set parallel.tp=2 --set plugins.sequence=sp"
item cp cp 2 "--set parallel.cp=2"
item ep ep 2 "--set parallel.ep=2"
item pp-1f1b pp 2 "--set parallel.pp=2 --set plugins.pipeline=1f1b --set train.micro_batch=1"
item pp-interleaved pp 2 "--set parallel.pp=2 --set plugins.pipeline=interleaved --set train.micro_batch=1"
item recompute-full recompute 1 "--set model.recompute=full"
item recompute-selective recompute 1 "--set model.recompute=selective"
item bf16 precision 1 "--set plugins.precision=bf16"
item fp16 precision 1 "--set plugins.precision=fp16"
item fp8 precision 1 "--set plugins.precision=fp8"
item async-ckpt ckpt 1 "--set plugins.ckpt=async --set checkpoint.every=2"
order=(ddp zero1 zero2 zero3 tp tp+sp cp ep pp-1f1b pp-interleaved recompute-full recompute-selective bf16 fp16 fp8 async-ckpt)

# train MODEL NAME NPROC SETS...: metrics in $work/NAME.
train() {
  local model=$1 name=$2 n=$3
  shift 3
  "$build/bin/loom" train "$work/$model.toml" --run-dir "$work/$name" --set parallel.nproc=$n \
    --set checkpoint.dir="$work/$name/ck" "$@" > "$work/$name.log" 2>&1
}

# worst NAME BASE: the largest relative difference of loss or grad norm over the steps.
worst() {
  python3 - "$work/$1/metrics.jsonl" "$work/$2/metrics.jsonl" <<'PY'
import json, sys
def rows(p):
    return [json.loads(l) for l in open(p) if '"loss"' in l]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert len(a) == len(b), (len(a), len(b))
print("%.1e" % max(max(abs(x[k] - y[k]) / abs(y[k]) for k in ("loss", "grad_norm")) for x, y in zip(a, b)))
PY
}

precision_of() {  # the precision a cell runs, for its baseline
  local p=fp32 i
  for i in "$@"; do [ "${slot[$i]}" = precision ] && p=$i; done
  echo "$p"
}

# cell NAME ITEM...: trains the composition and prints its table row.
passed=0 failed=0 refused=0
cell() {
  local name=$1
  shift
  local n=1 args=() i p
  for i in "$@"; do n=$((n * ranks[$i])); read -ra more <<< "${sets[$i]}"; args+=("${more[@]}"); done
  p=$(precision_of "$@")
  local model=dense mb=0 tol=1e-5 base
  [[ " $* " == *" ep "* ]] && model=moe
  [[ " $* " == *" pp-"* ]] && mb=1
  case $p in bf16|fp16) tol=2e-4 ;; fp8) tol=2e-3 ;; esac
  if [ "$against" = strict ]; then  # the same cell on the CPU, to the bit
    base="cpu-$name" tol=0
    if ! train "$model" "$base" "$n" "${args[@]}"; then
      local why
      why=$(grep -m1 -E "error" "$work/$base.log" | sed 's/^\[rank [0-9]*\] //; s/|/\\|/g')
      echo "| $name | $n | — | refused on the CPU too: ${why:-see log} |"; refused=$((refused + 1))
      return
    fi
    args+=(--set run.device=strict)
  else
    base="base-$model-$p-$mb"
    baseline "$model" "$p" "$mb"
  fi
  if train "$model" "$name" "$n" "${args[@]}"; then
    local w
    w=$(worst "$name" "$base")
    if python3 -c "import sys; sys.exit(0 if float('$w') <= $tol else 1)"; then
      echo "| $name | $n | $w | equal (≤ $tol) |"; passed=$((passed + 1))
    else
      echo "| $name | $n | $w | **differs** (> $tol) |"; failed=$((failed + 1))
    fi
  else
    local why
    why=$(grep -m1 -E "error" "$work/$name.log" | sed 's/^\[rank [0-9]*\] //; s/|/\\|/g')
    echo "| $name | $n | — | refused: ${why:-see log} |"; refused=$((refused + 1))
  fi
}

# baseline MODEL PRECISION MICRO_BATCH: the single-rank run a cell is compared with, trained once.
baseline() {
  local name="base-$1-$2-$3"
  [ -d "$work/$name" ] && return
  train "$1" "$name" 1 --set plugins.precision="$2" --set train.micro_batch="$3" || { cat "$work/$name.log"; exit 1; }
}
echo "| cell | ranks | worst rel. diff (loss, grad norm) | verdict |"
echo "|---|---|---|---|"
same_slot=0
if [ "$against" = strict ]; then  # each item alone first
  for x in "${order[@]}"; do
    [[ "$only" != all && ! "$x" =~ $only ]] && continue
    cell "$x" "$x"
  done
fi
for ((a = 0; a < ${#order[@]}; ++a)); do
  for ((b = a + 1; b < ${#order[@]}; ++b)); do
    x=${order[a]} y=${order[b]}
    [[ "$only" != all && ! "$x x $y" =~ $only ]] && continue
    if [ "${slot[$x]}" = "${slot[$y]}" ]; then same_slot=$((same_slot + 1)); continue; fi
    cell "$x x $y" "$x" "$y"
  done
done
for triple in "ddp tp pp-1f1b" "ddp cp tp" "ep ddp tp"; do
  read -ra t <<< "$triple"
  [[ "$only" != all && ! "${triple// / x }" =~ $only ]] && continue
  cell "${triple// / x }" "${t[@]}"
done
echo
echo "$passed equal, $failed differ, $refused refused; $same_slot pairs name two plugins for one slot (cannot compose)"
