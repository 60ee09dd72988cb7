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
# The suite runs under scripts/reaped.py, a subreaper: whatever a test leaves running, however it
# detached, is still below it when the suite ends, and is named and stopped there. Nothing else
# the user runs, in this terminal or another, is looked at. The fuzzers run even when ctest fails,
# so one failure does not hide another; the suite fails if either did.
suite() {
  local rc=0
  ctest --output-on-failure -j "$(nproc)" "$@" || rc=$?
  if [ "${LOOM_FUZZ_SECONDS:-30}" != 0 ]; then
    bash "$root/scripts/fuzz.sh" all "${LOOM_FUZZ_SECONDS:-30}" || rc=$((rc ? rc : $?))
  fi
  return "$rc"
}
if [ "${LOOM_SUITE_BODY:-}" = 1 ]; then  # this script again, below the subreaper
  cd "$build"
  suite "$@"
  exit
fi
bash "$root/scripts/build.sh"
rc=0
LOOM_SUITE_BODY=1 python3 "$root/scripts/reaped.py" --label "test suite" -- bash "$root/scripts/test.sh" "$@" || rc=$?
if [ "$rc" = 0 ]; then echo "test suite: no process left behind"; fi
exit "$rc"
