#!/usr/bin/env bash
# The tree's includes point down (scripts/check-layers.py over docs/architecture.md's folder
# order), and the check fails on a tree with an arrow back up, an include of a plugin, or a loop.
#   layers_test.sh REPO_ROOT
set -euo pipefail
root=$1
check="$root/scripts/check-layers.py"
python3 "$check" --root "$root"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make_tree() {  # a two-folder tree: runtime/top above runtime/low, plugins sealed
  rm -rf "$tmp/t" && mkdir -p "$tmp/t/docs" "$tmp/t/runtime/top" "$tmp/t/runtime/low" "$tmp/t/plugins/p"
  printf '# A\n\n### Which folder includes which\n\n```\nruntime/top  above\nruntime/low  below\nplugins      never included\n```\n' \
    > "$tmp/t/docs/architecture.md"
  printf '#pragma once\n' > "$tmp/t/runtime/low/b.hpp"
  printf '#pragma once\n' > "$tmp/t/plugins/p/p.hpp"
  printf '#include "low/b.hpp"\n' > "$tmp/t/runtime/top/a.cpp"
}
expect_fail() {  # expect_fail WHAT PATTERN
  local out
  if out=$(python3 "$check" --root "$tmp/t"); then echo "FAIL: $1 passed the check"; exit 1; fi
  grep -q "$2" <<<"$out" || { echo "FAIL: $1: no line matching '$2' in:"; echo "$out"; exit 1; }
  echo "ok: $1 caught"
}

make_tree
python3 "$check" --root "$tmp/t" >/dev/null || { echo "FAIL: a clean tree failed"; exit 1; }

make_tree; printf '#include "top/a.hpp"\n' > "$tmp/t/runtime/low/b.cpp"; printf '#pragma once\n' > "$tmp/t/runtime/top/a.hpp"
expect_fail "an arrow back up" "runtime/low/b.cpp includes runtime/top/a.hpp: runtime/top is listed above runtime/low"

make_tree; printf '#include "../../plugins/p/p.hpp"\n' > "$tmp/t/runtime/low/c.cpp"
expect_fail "an include of a plugin" "nothing outside plugins includes it"

make_tree; printf '#pragma once\n#include "low/d.hpp"\n' > "$tmp/t/runtime/low/c.hpp"
printf '#pragma once\n' > "$tmp/t/runtime/low/d.hpp"; printf '#include "low/c.hpp"\n' > "$tmp/t/runtime/low/d.cpp"
expect_fail "a loop inside a folder" "include loop inside runtime/low"
