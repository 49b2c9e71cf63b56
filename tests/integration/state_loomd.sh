#!/usr/bin/env bash
# loomd with --state: prefetch hints and host-tier accounting through a real loom-state.
# Args: build dir, source dir.
set -euo pipefail
build=$1 src=$2
pre=$(ldd "$build/libloomstate.so" | awk '/lib(a|ub)san\.so/ {print $3}' | paste -sd: -)
if [ -n "$pre" ]; then
        export LD_PRELOAD=$pre ASAN_OPTIONS=detect_leaks=0
fi
exec /usr/bin/python3 "$src/tests/integration/state_loomd_test.py" "$build" "$src"
