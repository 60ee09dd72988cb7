#!/usr/bin/env bash
# Tokenises English prose from Debian's fortunes package (the ASCII-art files left out), unless
# already done, twice:
#   data/fortunes/      bytes (vocabulary 256): the example configs and the GPU check
#   data/fortunes-bpe/  byte-level BPE trained on the corpus (vocabulary 1024, tokenizer.json
#                       beside the shards): the demo
#   scripts/fortunes.sh BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$1
mapfile -t texts < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' \
  ! -name '*.u8' ! -name 'art' ! -name 'ascii-art' ! -name 'translate-me' | sort)
[ -f "$root/data/fortunes/train_000000.bin" ] ||
  "$build/bin/loom" data prepare --text "${texts[@]}" --out "$root/data/fortunes" --val-fraction 0.05
[ -f "$root/data/fortunes-bpe/tokenizer.json" ] ||
  "$build/bin/loom" data prepare --text "${texts[@]}" --out "$root/data/fortunes-bpe" --val-fraction 0.05 \
    --train-tokenizer --vocab-size 1024
