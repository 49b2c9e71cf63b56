#!/usr/bin/env bash
# Real PyTorch GRPO jobs under loomd, shortened (a few steps): permits, bit-exact weight pulls,
# sparse deltas, a kill -9 of a rollout worker survived, same weights shared or not.
# Needs /usr/bin/python3 with torch and numpy (scripts/deps.sh).
# Usage: real_jobs.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
py=/usr/bin/python3
if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
  echo "FAIL: $py cannot import torch and numpy (scripts/deps.sh installs them)" >&2
  exit 1
fi
exec "$py" "$2/tests/integration/real_jobs_test.py" "$1" "$2"
