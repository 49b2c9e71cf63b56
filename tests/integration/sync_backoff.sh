#!/usr/bin/env bash
# The Python puller backs off when its publisher accepts and closes at once (or answers busy):
# over 2 s it connects a handful of times, not thousands.
# Usage: sync_backoff.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec /usr/bin/python3 "$2/tests/integration/sync_backoff_test.py" "$1" "$2"
