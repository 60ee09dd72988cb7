#!/usr/bin/env bash
# Installs the dependencies (idempotent) and builds Loom into build/ (or $LOOM_BUILD_DIR).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LOOM_BUILD_DIR:-$root/build}
bash "$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release ${LOOM_CMAKE_ARGS:-} > "$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
grep -E "^-- Loom" "$build.configure.log" || true
cmake --build "$build" -j "$(nproc)"
