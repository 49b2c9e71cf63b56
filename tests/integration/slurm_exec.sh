#!/usr/bin/env bash
# loomd driving a live Slurm cluster (scripts/slurm-cluster.sh): co-scheduled jobs run through
# Slurm on the nodes placement chose, a lone job holds only its training node and rolls out
# there, a second member joining and leaving brings the rollout node up and down with the
# rollouts moving along, a worker killed in Slurm is retried, idle nodes are powered down and up
# again, a kill -9 of loomd is reconciled. Skipped (with the reason) only
# where Slurm cannot start.
# Usage: slurm_exec.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/slurm_exec_test.py" "$1" "$2"
