#!/usr/bin/env bash
# loomd --executor local: each job's workers started as processes on this host with the
# permit protocol's environment, a killed worker retried (one restart), workers of an ended job
# stopped.
# Usage: exec_local.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/exec_local_test.py" "$1" "$2"
