#!/usr/bin/env bash
# Fault campaign under live jobs (not CI; needs root for the tmpfs that emulates a full disk):
# FAULTS (default 1000) faults of five kinds - kill -9 of loomd, of a worker, of loom-state
# mid-offload; the store's file system full; a worker frozen past its lease - then the counts:
# jobs finished with exactly their iterations or failed with a reason, acknowledged writes lost
# (must be 0), loomd exits on storage errors (must be 0: it refuses writes meanwhile and takes
# them again by itself), loomd starts that failed (must be 0; one that keeps failing ends the run
# at once with loomd's error, exit 2) and replay divergences after restarts (must be 0).
# Usage: bench/faults.sh BUILD_DIR [FAULTS] [SEED]
set -euo pipefail
b=${1:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
exec /usr/bin/python3 "$src/bench/faults.py" "$b" "$src" --faults "${2:-1000}" --seed "${3:-1}"
