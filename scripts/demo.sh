#!/usr/bin/env bash
# The demo from a fresh Debian 12 machine: install, build, tokenise the fortunes corpus, and
# train configs/demo.toml (a small GPT over a BPE vocabulary learnt from the corpus, a minute and a
# half to three minutes on 2 cores, as busy as they are).
# Extra arguments go to `loom train`, e.g. --set train.steps=100. Each demo trains in a new run
# directory (runs/demo-DATE-TIME) unless --run-dir names one, and leaves a checkpoint there to
# generate from.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LOOM_BUILD_DIR:-$root/build}
bash "$root/scripts/build.sh"
cd "$root"

bash "$root/scripts/fortunes.sh" "$build"
run_dir="runs/demo-$(date +%Y%m%d-%H%M%S)"
args=("$@")
for a in "$@"; do [[ $a == --run-dir* ]] && run_dir="" ; done
[[ -n $run_dir ]] && args=(--run-dir "$run_dir" "$@")
"$build/bin/loom" train configs/demo.toml "${args[@]}"
if [[ -n $run_dir ]]; then
  echo
  echo "more text from the trained model: $build/bin/loom generate $run_dir --prompt 'The meaning of life is'"
  echo "its curves in TensorBoard: tensorboard --logdir $run_dir/tensorboard"
fi
