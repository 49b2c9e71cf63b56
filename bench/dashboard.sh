#!/usr/bin/env bash
# The dashboard's poll, GET /v1/timeline, against the size of loomd's lease table: its cost
# follows the leases in the window, not the table. Prints figures; never fails on timing.
# Usage: bench/dashboard.sh BUILD_DIR [SOURCE_DIR]
set -euo pipefail
exec python3 "${2:-.}/bench/dashboard_timeline.py" "${1:-build}" "${2:-.}"
