#!/usr/bin/env bash
# loomd's tokens, tenant scope and TLS: every route x every role, a worker token on another job,
# revoked and expired tokens, forged tokens, a TLS handshake against the wrong CA, the C client
# (through the Python package) with a token and a CA file, and the refusals at start.
# Usage: loomd_auth.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/loomd_auth_test.py" "$1" "$2"
