#!/usr/bin/env bash
# loomd on a store that refuses writes: disk full (a small tmpfs filled to the brim; needs root,
# else that half is skipped) and write I/O errors (RLIMIT_FSIZE lowered on the running loomd
# with prlimit). Writes get 503 and change nothing, reads and held leases go on, loomd resumes
# once writes succeed again, and a restart replays to the same state.
# Usage: loomd_diskfull.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/loomd_diskfull_test.py" "$1" "$2"
