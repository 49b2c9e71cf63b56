#!/usr/bin/env bash
# A cap on what an SLO may cost (policy.slo_premium) in loomd: a bad value is refused naming the
# field and line; a job its own node cannot keep within SLO lone, whose own disaggregated group
# would cost more than the cap over colocation, runs lone with its SLO relaxed, which the
# decision and `loom submit` say; kill -9 replays to the same placement; another premium
# refuses the data dir. Usage: loomd_slo_premium.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/loomd_slo_premium_test.py" "$1" "$2"
