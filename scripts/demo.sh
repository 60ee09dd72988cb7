#!/usr/bin/env bash
# The demo from a fresh Debian 12 machine: install, build, then run configs/demo.toml.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LOOM_BUILD_DIR:-$root/build}
bash "$root/scripts/build.sh"
cd "$root"
"$build/bin/loom" plugins
"$build/bin/loom" config check configs/demo.toml "$@"
"$build/bin/loom" config show configs/demo.toml "$@"
