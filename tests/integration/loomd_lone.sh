#!/usr/bin/env bash
# Lone members in loomd: a job alone rolls out on its training node, a second member brings up
# the rollout node and the first job's rollouts move there, the first is alone again once the
# second leaves, kill -9 replays to the same state, and the policy fingerprint covers the setting.
# Usage: loomd_lone.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/loomd_lone_test.py" "$1" "$2"
