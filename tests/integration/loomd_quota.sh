#!/usr/bin/env bash
# Quotas per tenant and pages of the job list: a tenant over its jobs, GPU, node or $/h quota
# gets 429 (or 403 when the job alone is over) naming the quota and the numbers, the refusal
# changes nothing, usage and limits show in /v1/cluster and /metrics, a bad quota table stops
# loomd at start, and GET /v1/jobs pages with ?limit= and ?after=.
# Usage: loomd_quota.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/loomd_quota_test.py" "$1" "$2"
