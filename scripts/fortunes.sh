#!/usr/bin/env bash
# Tokenises English prose from Debian's fortunes package (the ASCII-art files left out) into
# data/fortunes/, the demo's corpus, unless it is already there.
#   scripts/fortunes.sh BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$1
[ -f "$root/data/fortunes/train_000000.bin" ] && exit 0
mapfile -t texts < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' \
  ! -name '*.u8' ! -name 'art' ! -name 'ascii-art' ! -name 'translate-me' | sort)
"$build/bin/loom" data prepare --text "${texts[@]}" --out "$root/data/fortunes" --val-fraction 0.05
