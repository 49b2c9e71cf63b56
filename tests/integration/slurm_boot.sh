#!/usr/bin/env bash
# loomd's Slurm executor on a cluster whose nodes take longer to boot than loomd's lease timeout:
# a job on powered-down nodes waits for them without spending a restart; a node Slurm marks down
# under a running job is a node failure (re-admitted elsewhere, no restart); a drained node takes
# no new placement; stopping loomd, killing it, or tearing the cluster down leaves no loom
# process or allocation behind. Skipped (with the reason) only where Slurm cannot start.
# Usage: slurm_boot.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/slurm_boot_test.py" "$1" "$2"
