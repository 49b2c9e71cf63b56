#!/usr/bin/env bash
# loomd's store across versions and over long histories: a data directory written under another
# core arithmetic is re-derived and says so (the same tampering under the same arithmetic is
# refused), and the log is compacted: restart replays the compacted log to the same state.
# Usage: loomd_store.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/loomd_store_test.py" "$1" "$2"
