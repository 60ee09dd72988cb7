#!/usr/bin/env bash
# `loom data prepare` on a corpus of GB gigabytes of JSONL (default 2): the fortunes, shuffled and
# repeated (tests/reference/prepare_reference.py), compressed with zstd. Prints Loom's rate and
# peak resident memory, Hugging Face tokenizers' encode_batch rate on the first 64 MB of the same
# documents with the same tokenizer.json and the same cores, their ratio, and whether Loom's ids
# equal the library's for 1,000 documents sampled from the corpus. Needs about 1.5 x GB of disk
# under $TMPDIR (default /tmp).
#   bench/prepare.sh [BUILD_DIR] [GB]
set -euo pipefail
build=${1:-build}
gb=${2:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
python="$root/.venv/bin/python"
ref="$root/tests/reference/prepare_reference.py"
[ -x "$python" ] || { echo "no $python: run scripts/install-deps.sh" >&2; exit 1; }
loom="$build/bin/loom"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "[bench] writing $gb GB of JSONL"
"$python" "$ref" corpus /usr/share/games/fortunes "$work/corpus.jsonl" "$(python3 -c "print($gb * 1000)")" 1
zstd -q -T0 "$work/corpus.jsonl" -o "$work/corpus.jsonl.zst"
"$python" "$ref" corpus /usr/share/games/fortunes "$work/one.jsonl" 1 2
"$loom" data prepare --jsonl "$work/one.jsonl" --out "$work/tok" --train-tokenizer --vocab-size 4096 > /dev/null
tok="$work/tok/tokenizer.json"
printf 'corpus: %s bytes of JSONL, %s bytes as zstd, %s documents; tokenizer: vocabulary 4096; %s cores (%s)\n' \
  "$(stat -c %s "$work/corpus.jsonl")" "$(stat -c %s "$work/corpus.jsonl.zst")" "$(wc -l < "$work/corpus.jsonl")" \
  "$(nproc)" "$(lscpu | sed -n 's/^Model name: *//p')"
summary=$("$loom" data prepare --jsonl "$work/corpus.jsonl.zst" --out "$work/d" --tokenizer "$tok" | tail -1)
echo "loom: $summary"
rate=$(sed -n 's/.*(\([0-9.]*\) MB\/s on.*/\1/p' <<< "$summary")
peak=$(sed -n 's/.*peak memory \([0-9]*\) MiB.*/\1/p' <<< "$summary")
hf=$("$python" "$ref" bench "$tok" "$work/corpus.jsonl" 64)
printf '  %-40s %8s MB/s of text\n' "Loom data prepare (zstd JSONL to shards)" "$rate" \
  "tokenizers encode_batch (first 64 MB)" "$hf"
python3 -c "print('  Loom / tokenizers: %.2f' % ($rate / $hf))"
python3 -c "print('  peak resident memory: %d MiB (%s 1 GiB)' % ($peak, 'under' if $peak < 1024 else 'NOT under'))"
"$python" "$ref" sample "$work/corpus.jsonl" "$work/sample.jsonl" 1000 3
"$loom" data prepare --jsonl "$work/sample.jsonl" --out "$work/s" --tokenizer "$tok" --val-fraction 0 > /dev/null
echo "  ids against tokenizers, 1,000 sampled documents: $("$python" "$ref" check "$tok" "$work/sample.jsonl" "$work/s")"
