#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 machine: install, build, ctest, then each fuzz
# target for LOOM_FUZZ_SECONDS (default 30; 0 skips them).
#   scripts/test.sh [ctest args]       the suite (this is what .ci/run calls)
#   scripts/test.sh --sanitize [args]  the suite built with ASan + UBSan in build-asan/ (no CUDA),
#                                      without the fuzzers; slower, not part of CI
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = "--sanitize" ]; then
  shift
  export LOOM_BUILD_DIR=${LOOM_BUILD_DIR:-$root/build-asan}
  export LOOM_CMAKE_ARGS="-DLOOM_SANITIZE=ON -DLOOM_WITH_CUDA=OFF ${LOOM_CMAKE_ARGS:-}"
  # Leaks in Open MPI and gloo's process-lifetime singletons are not ours; memory errors are.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  export LOOM_FUZZ_SECONDS=0
fi
build=${LOOM_BUILD_DIR:-$root/build}
bash "$root/scripts/build.sh"
cd "$build"
# Processes of this session younger than the suite, other than this script's own: what a test
# left behind (an orphan keeps its session; other sessions' processes are not the suite's).
suite_start=$(date +%s)
session=$(ps -o sid= -p $$ | tr -d ' ')
leftovers() {
  local age=$(($(date +%s) - suite_start + 1)) shell=$BASHPID  # this function's own shell, and its ps and awk
  ps -eo pid=,ppid=,sid=,etimes=,args= | awk -v age="$age" -v me=$$ -v shell="$shell" -v sid="$session" \
    '$3 == sid && $4 <= age && $1 != me && $2 != me && $1 != shell && $2 != shell && $5 !~ /^\[/'
}
ctest --output-on-failure -j "$(nproc)" "$@"
if [ "${LOOM_FUZZ_SECONDS:-30}" != 0 ]; then
  bash "$root/scripts/fuzz.sh" all "${LOOM_FUZZ_SECONDS:-30}"
fi
# A test that leaves a process running makes every later timing on the machine wrong (a leaked
# busy loop once made them 4x slower): the suite fails, naming it, and it is stopped.
sleep 2  # what the last test stopped is still exiting
left=$(leftovers)
if [ -n "$left" ]; then
  echo "test suite: processes started by the suite are still running:"
  echo "$left"
  echo "$left" | awk '{print $1}' | xargs -r kill 2> /dev/null || true
  exit 1
fi
echo "test suite: no process left behind"
