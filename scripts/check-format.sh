#!/usr/bin/env bash
# The tree's C, C++ and CUDA files are as clang-format writes them (.clang-format): lists each
# file that differs and exits 1, else says how many it checked. The suite runs it.
#   scripts/check-format.sh           check
#   scripts/check-format.sh --fix     rewrite the files that differ
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mapfile -t files < <(git ls-files -- '*.c' '*.cc' '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit
fi
if out=$(clang-format --dry-run -Werror "${files[@]}" 2>&1); then
  echo "${#files[@]} files as clang-format writes them"
  exit
fi
bad=$(grep -oE '^[^:]+:[0-9]+:[0-9]+: error' <<<"$out" | cut -d: -f1 | sort -u)
printf 'not as clang-format writes it: %s\n' $bad
echo "$(wc -w <<<"$bad") of ${#files[@]} files differ; scripts/check-format.sh --fix rewrites them"
exit 1
