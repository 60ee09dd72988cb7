#!/usr/bin/env bash
# Runs one fuzz target for a while: scripts/fuzz.sh TARGET SECONDS [--keep], or `all SECONDS`.
# Targets: config manifest shard safetensors descriptor (tests/fuzz/*_fuzz.cpp). Builds them with
# clang's libFuzzer, ASan and UBSan in build-fuzz/ and starts from the seeds in
# tests/fuzz/corpus/TARGET; what it finds goes to build-fuzz/corpus/TARGET, and --keep merges the
# inputs that add coverage back into tests/fuzz/corpus (minimised, to commit). A crash, a
# sanitizer report or an unexpected exception stops it with the input saved under
# build-fuzz/findings/TARGET, and the script exits 1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${1:?usage: scripts/fuzz.sh TARGET|all SECONDS}
seconds=${2:-30}
keep=${3:-}
targets=(config manifest shard safetensors descriptor)
build=${LOOM_FUZZ_BUILD_DIR:-$root/build-fuzz}

bash "$root/scripts/install-deps.sh" > /dev/null
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root/tests/fuzz" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
fi
cmake --build "$build" -j "$(nproc)" > "$build/build.log" 2>&1 || { tail -30 "$build/build.log"; exit 1; }

run_one() {
  local t=$1 corpus="$root/tests/fuzz/corpus/$1" found="$build/corpus/$1"
  rm -rf "$build/findings/$t"
  mkdir -p "$corpus" "$found" "$build/findings/$t"
  echo "[fuzz] $t for ${seconds}s (corpus: $(ls "$corpus" | wc -l) inputs)"
  # One job, no forking: the whole machine has two cores. -rss_limit_mb keeps a runaway
  # allocation a finding instead of a machine swapping.
  "$build/fuzz_$t" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$build/findings/$t/" "$found" "$corpus" 2>&1 | grep -E "^#[0-9]+ *DONE|stat::number_of_executed_units|ERROR|SUMMARY|Test unit written" || true
  if [ -n "$(find "$build/findings/$t" -type f)" ]; then
    echo "[fuzz] $t: FINDINGS in $build/findings/$t"
    return 1
  fi
  if [ "$keep" = --keep ]; then
    "$build/fuzz_$t" -merge=1 "$corpus" "$found" > /dev/null 2>&1
    echo "[fuzz] $t: tests/fuzz/corpus/$t now holds $(ls "$corpus" | wc -l) inputs"
  fi
  echo "[fuzz] $t: clean"
}

status=0
if [ "$target" = all ]; then
  for t in "${targets[@]}"; do run_one "$t" || status=1; done
else
  run_one "$target" || status=1
fi
exit $status
