#!/usr/bin/env bash
# `loom demo`: --help exits 0 (scripts/run.sh relies on it), bad usage exits 2, and a short
# run finishes, prints the final table and leaves no process and no temporary directory.
# Usage: demo_run.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
b=$1
"$b/loom" demo --help | grep -q "usage: loom demo"
rc=0; "$b/loom" demo --jobs 9 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: bad usage exited $rc, want 2"; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# Every process the demo starts inherits this tag, so leftovers can be found even while
# other demos (other tests) run.
tag="loom-demo-test-$$-$RANDOM"
LOOM_DEMO_TEST_TAG=$tag "$b/loom" demo --jobs 4 --alone 1 --scale 0.5 | tee "$out"
grep -q "rejected" "$out"                  # the fourth job does not fit a node
grep -q "direct_pack" "$out"               # the others share a group
grep -q "cost per iteration" "$out"
grep -Eq "^math .* 10 " "$out"             # every job ran its iterations
dir=$(sed -n 's/.*data in \([^;]*\);.*/\1/p' "$out" | head -1)
[ -n "$dir" ] && [ ! -e "$dir" ] || { echo "FAIL: temporary dir '$dir' left behind"; exit 1; }
left=$(grep -lsa "LOOM_DEMO_TEST_TAG=$tag" /proc/[0-9]*/environ || true)
[ -z "$left" ] || { echo "FAIL: demo processes left running: $left"; exit 1; }
echo "ok   demo finished and cleaned up"
