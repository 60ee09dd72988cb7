#!/usr/bin/env bash
# The demo from a fresh Debian 12 machine: install, build, tokenise the fortunes corpus, and
# train configs/demo.toml (a small byte-level GPT, a few minutes on 2 cores).
# Extra arguments go to `loom train`, e.g. --set train.steps=100.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LOOM_BUILD_DIR:-$root/build}
bash "$root/scripts/build.sh"
cd "$root"

if [ ! -f data/fortunes/train_000000.bin ]; then
  # English prose from Debian's fortunes package; the ASCII-art files are left out.
  mapfile -t texts < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' \
    ! -name '*.u8' ! -name 'art' ! -name 'ascii-art' ! -name 'translate-me' | sort)
  "$build/bin/loom" data prepare --text "${texts[@]}" --out data/fortunes --val-fraction 0.05
fi
"$build/bin/loom" train configs/demo.toml "$@"
