#!/usr/bin/env bash
# loomd's HTTP API: lifecycle, bad input (status codes, nothing changed), slow clients, SIGTERM.
# Usage: loomd_api.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/loomd_api_test.py" "$1" "$2"
