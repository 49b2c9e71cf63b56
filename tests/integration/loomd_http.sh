#!/usr/bin/env bash
# loomd's HTTP edge against hostile clients: ambiguous framing (two Content-Lengths, a
# Content-Length with chunked), control characters in names, worker tokens in other spellings,
# TLS below 1.2, and connections that trickle a request's head to hold slots.
# Usage: loomd_http.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/loomd_http_test.py" "$1" "$2"
