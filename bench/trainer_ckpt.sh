#!/usr/bin/env bash
# The trainer's checkpoint at each train-permit end (examples/rl): bytes and milliseconds per
# permit end for policy sizes s, m, l, to loom-state and to a file (tmp + fsync + rename),
# against the Adam-moments-only offload a permit end did before, in the same process.
# Needs /usr/bin/python3 with torch and numpy. Usage: bench/trainer_ckpt.sh BUILD_DIR [ROUNDS]
# ($LOOM_STATE_BIN: another loom-state binary, e.g. a sanitized one)
set -euo pipefail
b=$(cd "${1:-build}" && pwd)
rounds=${2:-20}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
"${LOOM_STATE_BIN:-$b/loom-state}" --dir "$dir" --host-bytes 256M --disk-bytes 256M --no-mlock --quiet &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 500); do [ -S "$dir/loom-state.sock" ] && break; sleep 0.02; done
LOOM_CLIENT_LIB="$b/libloomclient.so" LOOM_STATE_LIB="$b/libloomstate.so" \
  /usr/bin/python3 "$here/trainer_ckpt.py" "$b" "$dir/loom-state.sock" "$rounds"
