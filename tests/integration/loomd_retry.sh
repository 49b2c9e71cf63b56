#!/usr/bin/env bash
# Failed jobs are retried, drifting jobs re-admitted: kill -9 of real worker processes under a
# supervisor, resumption with no iteration counted twice, a loomd restart in between, used-up
# max_restarts, and phases running longer than declared.
# Usage: loomd_retry.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/loomd_retry_test.py" "$1" "$2"
