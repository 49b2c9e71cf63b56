#!/usr/bin/env bash
# Three real PyTorch GRPO jobs (examples/rl) shared under loomd, then the same jobs alone
# (loom demo --real --quiet): iterations/hour and cost/iteration shared vs alone, held-out
# reward before and after, the fraction of bf16 weights each step changes and the bytes the
# sparse deltas moved against dense copies. The learning figures are deterministic; the
# timings are of one run on whatever else the machine runs (rerun to see the spread).
# Needs /usr/bin/python3 with torch and numpy. Usage: bench/real_jobs.sh BUILD_DIR [STEPS]
set -euo pipefail
b=${1:-build}
steps=${2:-20}
exec "$b/loom" demo --real --quiet --steps "$steps"
