#!/usr/bin/env bash
# loom-worker's permit loop against a scripted loomd (tests/integration/loom_worker_test.py):
# a 503 is waited out, a follower's 307 is followed, a late release (410) runs the phase again.
set -euo pipefail
build=$1 src=$2
timeout 120 python3 "$src/tests/integration/loom_worker_test.py" "$src"
