#!/usr/bin/env bash
# The test suite beside a busy process, as it will meet a shared machine: one busy loop
# (`sh -c 'while :; do :; done'`) holds a core the whole time, and scripts/test.sh runs RUNS times
# in a row (default 2), fuzzers included. Each run's log goes to build/load-check/run-N.log; the
# script prints each run's verdict and wall time, and fails if any run failed. Run it before a
# release: a test that asserts a time fails here first.
#   scripts/test-under-load.sh [RUNS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-2}
logs=${LOOM_BUILD_DIR:-$root/build}/load-check
mkdir -p "$logs"
sh -c 'while :; do :; done' &
busy=$!
trap 'kill "$busy" 2> /dev/null || true' EXIT
echo "busy process $busy on $(nproc) cores; logs in $logs"
failed=0
for run in $(seq "$runs"); do
  start=$(date +%s)
  rc=0
  bash "$root/scripts/test.sh" > "$logs/run-$run.log" 2>&1 || rc=$?
  took=$(($(date +%s) - start))
  summary=$(grep -E "tests passed|tests failed out of" "$logs/run-$run.log" | tail -1 || true)
  printf 'run %d: exit %d after %dm%02ds; %s\n' "$run" "$rc" $((took / 60)) $((took % 60)) "${summary:-no ctest summary}"
  grep -E "^\[fuzz\].*(clean|FINDINGS)|test suite:" "$logs/run-$run.log" | sed 's/^/  /' || true
  [ "$rc" = 0 ] || failed=1
done
exit "$failed"
