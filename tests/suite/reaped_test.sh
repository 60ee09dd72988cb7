#!/usr/bin/env bash
# The suite's leftover check (scripts/reaped.py): what the command leaves running is named and
# stopped, however it detached; a process started beside it, in the same session, after it began,
# is neither named nor stopped.
#   tests/suite/reaped_test.sh scripts/reaped.py
set -uo pipefail
reaped=$1
work=$(mktemp -d)
trap 'kill "$beside" 2> /dev/null; rm -rf "$work"' EXIT
passed=0 failed=0
check() {  # check NAME CONDITION-COMMAND...
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "PASS: $name"; else failed=$((failed + 1)); echo "FAIL: $name"; fi
}
alive() { kill -0 "$1" 2> /dev/null; }

# A command that leaves three sleeps behind: one in a new session, one double-forked, one nohup'ed;
# while it runs, a sleep is started beside it, in this session.
python3 "$reaped" --label "the command" -- bash -c "
  setsid sleep 1001 > /dev/null 2>&1 &
  echo \$! > '$work/setsid'
  ( sleep 1002 & echo \$! > '$work/double' )
  nohup sleep 1003 > /dev/null 2>&1 &
  echo \$! > '$work/nohup'
  sleep 1
  exit 0" > "$work/out" 2>&1 &
runner=$!
sleep 0.3
sleep 1004 &
beside=$!
wait "$runner"
rc=$?
cat "$work/out"
check "the run fails: it left processes behind (exit $rc)" test "$rc" = 1
for what in setsid double nohup; do
  pid=$(cat "$work/$what")
  check "the $what sleep ($pid) is named" grep -q "^ *$pid (parent [0-9]*) sleep 100" "$work/out"
  check "the $what sleep ($pid) is stopped" bash -c "! kill -0 $pid 2> /dev/null"
done
check "the sleep started beside it ($beside) is not named" bash -c "! grep -q 'sleep 1004' '$work/out'"
check "the sleep started beside it ($beside) still runs" alive "$beside"

# The command gets the signal defaults a shell gives (Python ignores SIGPIPE for itself).
python3 "$reaped" -- bash -c 'yes | head -1 > /dev/null; exit "${PIPESTATUS[0]}"'
rc=$?
check "a writer to a closed pipe ends by SIGPIPE, as under a shell (exit $rc)" test "$rc" = 141

# A command that leaves nothing: its own exit status, and no listing.
python3 "$reaped" -- bash -c "sleep 0.2 & wait; exit 7" > "$work/clean" 2>&1
rc=$?
check "a clean command's status passes through (exit $rc)" test "$rc" = 7
check "a clean command gets no listing" test ! -s "$work/clean"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
