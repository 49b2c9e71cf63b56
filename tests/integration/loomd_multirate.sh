#!/usr/bin/env bash
# Multi-rate groups in loomd: a short job joins a long job's group at a rate > 1, gets that many
# training permits per meta-iteration in the core's order, and kill -9 replays to the same rates.
# Usage: loomd_multirate.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/loomd_multirate_test.py" "$1" "$2"
