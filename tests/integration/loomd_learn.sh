#!/usr/bin/env bash
# Learned-profile admission in loomd: a job whose phases run well under its declared worst case
# gets its group re-planned on what it does, a job refused beside it before now packs into that
# group, and kill -9 of loomd replays to the same re-plans and placements.
# Usage: loomd_learn.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/loomd_learn_test.py" "$1" "$2"
