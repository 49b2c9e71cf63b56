#!/usr/bin/env bash
# The operators' dashboard in headless Chromium against a live loomd running jobs of two tenants;
# saves BUILD_DIR/dashboard.png. Skipped (77) when Chromium is not installed.
# Usage: dashboard.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/dashboard_test.py" "$1" "$2"
