#!/usr/bin/env bash
# loomd's /metrics against a real daemon: the exposition format (promtool where installed, and
# the format's rules checked here), per-job series, lease outcomes, 409s apart, HEAD.
# Usage: loomd_metrics.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/loomd_metrics_test.py" "$1" "$2"
