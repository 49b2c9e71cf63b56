#!/usr/bin/env bash
# Lease expiry, heartbeat, failures and restart through the Python package.
# Usage: loomd_lease.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/loomd_lease_test.py" "$1" "$2"
