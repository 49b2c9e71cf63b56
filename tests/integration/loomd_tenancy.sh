#!/usr/bin/env bash
# What one tenant sees of others: job ids that say nothing of other tenants' jobs (stable across
# a restart; worker tokens carry them), /v1/cluster counting the tenant's own jobs and groups,
# ?explain=1 candidates in other tenants' groups redacted, another tenant's job answering as a
# missing one. Without tokens ids stay 1, 2, 3.
# Usage: loomd_tenancy.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/loomd_tenancy_test.py" "$1" "$2"
