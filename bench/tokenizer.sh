#!/usr/bin/env bash
# Encoding speed: Loom's byte-level BPE against Hugging Face tokenizers (Rust) on the same file,
# the same tokenizer.json and one thread each, measured in the same run; prints both rates in MB/s
# and their ratio. The tokenizer is trained by Loom on the demo corpus (vocabulary 4096, or $2).
#   bench/tokenizer.sh [BUILD_DIR] [VOCAB]
set -euo pipefail
build=${1:-build}
vocab=${2:-4096}
root=$(cd "$(dirname "$0")/.." && pwd)
python="$root/.venv/bin/python"
[ -x "$python" ] || { echo "no $python: run scripts/install-deps.sh" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' ! -name art ! -name ascii-art \
  ! -name translate-me | sort | xargs cat > "$work/corpus.txt"
"$build/bin/loom" data prepare --text "$work/corpus.txt" --out "$work/d" --train-tokenizer --vocab-size "$vocab" > /dev/null
rate_loom() {  # the best of 3: Loom reports its encode rate on stderr with --check
  local best=0 r
  for _ in 1 2 3; do
    r=$("$build/bin/loom" data encode --check --tokenizer "$work/d/tokenizer.json" --text "$work/corpus.txt" \
          --out "$work/ids.txt" 2>&1 | sed -n 's/.* \([0-9.]*\) MB\/s.*/\1/p')
    best=$(python3 -c "print(max($best, $r))")
  done
  echo "$best"
}
loom=$(OMP_NUM_THREADS=1 rate_loom)
hf=$(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false "$python" "$root/tests/reference/tokenizer_reference.py" bench \
       "$work/d/tokenizer.json" "$work/corpus.txt")
printf 'corpus %s bytes, vocabulary %s, one thread\n' "$(stat -c %s "$work/corpus.txt")" "$vocab"
printf '  %-28s %8s MB/s\n' "Loom" "$loom" "Hugging Face tokenizers" "$hf"
python3 -c "print('  Loom / tokenizers: %.2f' % ($loom / $hf))"
