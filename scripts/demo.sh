#!/usr/bin/env bash
# The demo from a fresh Debian 12 machine: install, build, tokenise the fortunes corpus, and
# train configs/demo.toml (a small GPT over a BPE vocabulary learnt from the corpus, about three
# minutes on 2 cores).
# Extra arguments go to `loom train`, e.g. --set train.steps=100.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LOOM_BUILD_DIR:-$root/build}
bash "$root/scripts/build.sh"
cd "$root"

bash "$root/scripts/fortunes.sh" "$build"
"$build/bin/loom" train configs/demo.toml "$@"
