#!/usr/bin/env bash
# loom-state with real processes: DP workers, a killed client, kill -9 of the daemon during
# disk writes (tests/integration/state_test.py). Args: build dir, source dir.
set -euo pipefail
build=$1 src=$2
if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
        echo "numpy not importable from /usr/bin/python3 (scripts/deps.sh installs it)" >&2
        exit 1
fi
# A sanitized libloomstate.so loads into Python only with the sanitizer runtimes preloaded.
pre=$(ldd "$build/libloomstate.so" | awk '/lib(a|ub)san\.so/ {print $3}' | paste -sd: -)
if [ -n "$pre" ]; then
        export LD_PRELOAD=$pre ASAN_OPTIONS=detect_leaks=0
fi
exec /usr/bin/python3 "$src/tests/integration/state_test.py" "$build" "$src"
