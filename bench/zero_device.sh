#!/usr/bin/env bash
# ZeRO on a device, the whole matrix: every stage (zero1, zero2, zero3) x wire (fp32, bf16, fp8:
# reduce_dtype, and gather_dtype for zero3) x layout (dp2, dp2 x tp2, dp2 x pp2, dp2 x cp2, and
# dp2 x ep2 on a MoE model) x embeddings (untied: llama-tiny; tied: gpt2-tiny), each trained on the
# strict emulated device and on the CPU and compared step by step. A cell passes only when the
# two are equal bit for bit (loss and grad norm every step): the device run keeps every shard,
# bucket, gathered layer and wire buffer in memory the host cannot touch (docs/cuda.md), so equal
# bits say the plugin's device path is the CPU's. Prints a Markdown table and a summary line.
#   bench/zero_device.sh [BUILD_DIR] [STEPS] [CELLS]   (CELLS: "all" or a regex of cell names)
# dist_tests holds a subset of it (strict device: zero1, zero2 and zero3 ...).
set -euo pipefail
build=${1:-build}
steps=${2:-4}
only=${3:-all}
source "$(dirname "$0")/corpus.sh"
bench_workdir "$build" 2000 "a sharded optimizer trains the same model on every device"
model_file() {  # model_file NAME PRESET MODEL_LINES
  { bench_run_section; printf '[model]\npreset = "%s"\nseq_len = 16\n%s\n' "$2" "$3"
    printf '[data]\ndir = "%s"\n[train]\nsteps = %s\nglobal_batch = 8\nlr = 1e-3\nwarmup_steps = 2\neval_every = 0\n' \
      "$work/data" "$steps"; } > "$work/$1.toml"
}
model_file untied llama-tiny ""
model_file tied gpt2-tiny "n_layer = 4"
model_file moe llama-tiny "moe = { experts = 4, top_k = 2, every = 2, capacity_factor = 1.0 }"

declare -A layout=(
  [dp2]="--set parallel.nproc=2"
  [dp2xtp2]="--set parallel.nproc=4 --set parallel.tp=2"
  [dp2xpp2]="--set parallel.nproc=4 --set parallel.pp=2 --set train.micro_batch=1"
  [dp2xcp2]="--set parallel.nproc=4 --set parallel.cp=2"
  [dp2xep2]="--set parallel.nproc=4 --set parallel.ep=2"
)

# metrics NAME: the loss and grad norm of every step, one line each.
metrics() { grep -o '"loss": [-0-9.e]*\|"grad_norm": [-0-9.e]*' "$work/$1/metrics.jsonl"; }
train() {  # train MODEL NAME SETS...
  local model=$1 name=$2
  shift 2
  "$build/bin/loom" train "$work/$model.toml" --run-dir "$work/$name" "$@" > "$work/$name.log" 2>&1
}

passed=0 failed=0 refused=0
echo "| cell | verdict |"
echo "|---|---|"
for stage in zero1 zero2 zero3; do
  for wire in fp32 bf16 fp8; do
    for l in dp2 dp2xtp2 dp2xpp2 dp2xcp2 dp2xep2; do
      for emb in untied tied; do
        model=$emb
        [ "$l" = dp2xep2 ] && { [ "$emb" = tied ] && continue; model=moe; }
        name="$stage-$wire-$l-$emb"
        [[ "$only" != all && ! "$name" =~ $only ]] && continue
        read -ra sets <<< "${layout[$l]} --set plugins.data=$stage --set plugins.$stage.reduce_dtype=$wire"
        [ "$stage" = zero3 ] && sets+=(--set "plugins.$stage.gather_dtype=$wire")
        if ! train "$model" "cpu-$name" "${sets[@]}"; then
          why=$(grep -m1 error "$work/cpu-$name.log" | sed 's/^\[rank [0-9]*\] //; s/|/\\|/g')
          echo "| $name | refused on the CPU too: ${why:-see log} |"; refused=$((refused + 1)); continue
        fi
        if ! train "$model" "strict-$name" "${sets[@]}" --set run.device=strict; then
          why=$(grep -m1 error "$work/strict-$name.log" | sed 's/^\[rank [0-9]*\] //; s/|/\\|/g')
          echo "| $name | **fails on strict**: ${why:-see log} |"; failed=$((failed + 1)); continue
        fi
        if [ "$(metrics "cpu-$name")" = "$(metrics "strict-$name")" ]; then
          echo "| $name | equal, bit for bit |"; passed=$((passed + 1))
        else
          echo "| $name | **differs** |"; failed=$((failed + 1))
        fi
        rm -rf "$work/cpu-$name" "$work/strict-$name"
      done
    done
  done
done
echo
echo "$passed equal, $failed differ or fail, $refused refused on the CPU too"
[ "$failed" -eq 0 ]
