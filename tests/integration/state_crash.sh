#!/usr/bin/env bash
# loom-state with real processes: DP workers, a killed client, kill -9 of the daemon during
# disk writes (tests/integration/state_test.py). Args: build dir, source dir.
set -euo pipefail
build=$1 src=$2
if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
        echo "numpy not importable from /usr/bin/python3 (scripts/deps.sh installs it)" >&2
        exit 1
fi
ls=$build/loom-state
"$ls" --help | grep -q "usage: loom-state"
rc=0; "$ls" --dir /tmp/x --host-bytes abc 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: bad --host-bytes exited $rc, want 2"; exit 1; }
rc=0; "$ls" --dir /proc/no/such --no-mlock 2>/dev/null || rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: unusable --dir exited $rc, want 1"; exit 1; }
# sizes with a T suffix (docs/state.md's example): the daemon starts with a 1 TiB disk tier
scratch1=$(mktemp -d)
"$ls" --dir "$scratch1" --host-bytes 16M --disk-bytes 1T --no-mlock --quiet &
sp=$!
for _ in $(seq 200); do [ -S "$scratch1/loom-state.sock" ] && break; sleep 0.05; done
cap=$("$ls" stat --sock "$scratch1/loom-state.sock" --json | sed -n 's/.*"disk_cap": *\([0-9]*\).*/\1/p')
kill "$sp"; wait "$sp" || true; rm -rf "$scratch1"
[ "$cap" = 1099511627776 ] || { echo "FAIL: --disk-bytes 1T gave disk_cap '$cap'"; exit 1; }
echo "ok: --disk-bytes 1T accepted (disk_cap $cap)"
rc=0; "$ls" --dir /tmp/x --disk-bytes 1TB 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: --disk-bytes 1TB exited $rc, want 2"; exit 1; }
for bad in "--max-conns 0" "--max-conns-per-uid 2x" "--idle-timeout -1" "--msg-timeout x"; do
        rc=0; "$ls" --dir /tmp/x $bad 2>/dev/null || rc=$?
        [ "$rc" -eq 2 ] || { echo "FAIL: $bad exited $rc, want 2"; exit 1; }
done
# an owners file with a line that does not parse: the daemon starts, says which line it skipped
scratch2=$(mktemp -d)
printf '1000 fine\nnot a line\n1000 torn' > "$scratch2/owners"
"$ls" --dir "$scratch2" --host-bytes 16M --no-mlock --max-conns-per-uid 8 2>"$scratch2/log" &
sp=$!
for _ in $(seq 200); do [ -S "$scratch2/loom-state.sock" ] && break; sleep 0.05; done
"$ls" stat --sock "$scratch2/loom-state.sock" --json | grep -q '"ok"\|host_cap' ||
        { echo "FAIL: no stat from a daemon with a bad owners line"; cat "$scratch2/log"; exit 1; }
kill "$sp"; wait "$sp" || true
grep -q "owners line 2 skipped (no uid): 'not a line'" "$scratch2/log" &&
        grep -q "line 3 skipped (unterminated last line)" "$scratch2/log" ||
        { echo "FAIL: skipped owners lines not logged"; cat "$scratch2/log"; exit 1; }
rm -rf "$scratch2"
echo "ok: bad owners lines skipped and logged, the daemon serves"
# the bench's JSON has every key of the figures; the DP=8 footprint is exactly 1/8
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
json=$("$ls" bench --quick --json --dir "$scratch")
/usr/bin/python3 - "$json" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
for k in ("load_gbps", "memcpy_gbps", "disk_read_gbps", "dd_direct_gbps", "dedup_ratio",
          "prefetch_hidden_fraction"):
    assert k in j, k
assert j["dedup_ratio"] == 0.125, j["dedup_ratio"]
assert j["load_gbps"] > 0 and j["disk_read_gbps"] > 0, j
print("ok:", "bench --json keys present, dedup_ratio 0.125")
PY
[ -z "$(ls -A "$scratch")" ] || { echo "FAIL: bench left files in $scratch"; exit 1; }
# A sanitized libloomstate.so loads into Python only with the sanitizer runtimes preloaded.
. "$src/tests/integration/lib/py.sh"
san_preload "$build/libloomstate.so"
/usr/bin/python3 "$src/tests/integration/state_test.py" "$build" "$src"
