#!/usr/bin/env bash
# The plan -> admission bridge end to end: plan a demo-sized job on a small heterogeneous fleet,
# submit the emitted spec to a live loomd, run its phases, and read planned vs observed phase
# times from the job's JSON.
# Usage: plan_bridge.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/plan_bridge_test.py" "$1" "$2"
