#!/usr/bin/env bash
# Runs one fuzz target for a while: scripts/fuzz.sh TARGET SECONDS, or `all SECONDS` for every one.
# Targets: config manifest shard safetensors descriptor (tests/fuzz/*_fuzz.cpp). Builds them with
# clang's libFuzzer, ASan and UBSan in build-fuzz/, starts from tests/fuzz/corpus/TARGET and adds
# what it finds there (so the corpus grows as it is run). A crash, a sanitizer report or an
# unexpected exception stops it with the input saved under build-fuzz/findings/, exit 1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${1:?usage: scripts/fuzz.sh TARGET|all SECONDS}
seconds=${2:-30}
targets=(config manifest shard safetensors descriptor)
build=${LOOM_FUZZ_BUILD_DIR:-$root/build-fuzz}

bash "$root/scripts/install-deps.sh" > /dev/null
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root/tests/fuzz" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
fi
cmake --build "$build" -j "$(nproc)" > "$build/build.log" 2>&1 || { tail -30 "$build/build.log"; exit 1; }

run_one() {
  local t=$1 corpus="$root/tests/fuzz/corpus/$1"
  mkdir -p "$corpus" "$build/findings/$t"
  echo "[fuzz] $t for ${seconds}s (corpus: $(ls "$corpus" | wc -l) inputs)"
  # One job, no forking: the whole machine has two cores. -rss_limit_mb keeps a runaway
  # allocation a finding instead of a machine swapping.
  "$build/fuzz_$t" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$build/findings/$t/" "$corpus" 2>&1 | grep -E "^#[0-9]+ *DONE|stat::number_of_executed_units|ERROR|SUMMARY|Test unit written" || true
  if ls "$build/findings/$t"/crash-* "$build/findings/$t"/leak-* "$build/findings/$t"/timeout-* "$build/findings/$t"/oom-* > /dev/null 2>&1; then
    echo "[fuzz] $t: FINDINGS in $build/findings/$t"
    return 1
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
