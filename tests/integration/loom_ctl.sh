#!/usr/bin/env bash
# `loom submit`, `jobs`, `job`, `cancel`, `groups`, `nodes`, `cluster`, `events` against a live
# loomd with tokens and TLS: what each role sees (a tenant never another tenant's jobs), tables
# and -o json, --dry-run changing nothing, job files' errors at file:line:column, and the exit
# status of each kind of failure (refused, bad usage, unreachable or wrong CA, no token).
# Usage: loom_ctl.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/loom_ctl_test.py" "$1" "$2"
