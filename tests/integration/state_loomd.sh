#!/usr/bin/env bash
# loomd with --state: prefetch hints and host-tier accounting through a real loom-state.
# Args: build dir, source dir.
set -euo pipefail
build=$1 src=$2
. "$src/tests/integration/lib/py.sh"
san_preload "$build/libloomstate.so"
exec /usr/bin/python3 "$src/tests/integration/state_loomd_test.py" "$build" "$src"
