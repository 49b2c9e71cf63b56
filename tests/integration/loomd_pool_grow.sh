#!/usr/bin/env bash
# Training pools that grow (policy.pool_grow) in loomd: a job that can neither run lone nor join
# a group as its pool stands joins one whose training pool it grows, which the decision, the
# members and /v1/cluster show; kill -9 replays to the same pools; its cancellation shrinks the
# pool again; a store with a grown pool refuses a policy without growth, and without it the job
# opens a group of its own. Usage: loomd_pool_grow.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/loomd_pool_grow_test.py" "$1" "$2"
