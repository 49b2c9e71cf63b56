#!/usr/bin/env bash
# Sim-to-real: the same window of jobs through loomd's Slurm executor on a local Slurm cluster
# (power saving on, nodes that take --boot-s to come up), through the same Slurm colocated (one
# training node per job), and through `loom sim`; prints provisioned node-seconds and dollars per
# pool by Slurm's records, by loomd's accounting and by the simulator, side by side
# (docs/sim.md, "Against a real engine").
#
#   bench/sim2slurm.sh [BUILD_DIR] [--jobs N] [--seed S] [--gap-s G] [--boot-s B]
#                      [--sim-boot-s B] [--sim-launch-s L] [--rollout-nodes R] [--train-nodes T]
#                      [--only-sim] [--keep]
#
# Defaults: BUILD_DIR build, 30 jobs, seed 1, mean arrival gap 8 s, a 4 s boot, 8 rollout and 10
# training nodes. Time is scaled: 1 simulated minute = 1 s. Needs root and Slurm's Debian
# packages (scripts/deps.sh); about 12 minutes on a 2-core machine. --only-sim prints the
# simulator's rows alone (no Slurm, a second).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=build
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then build=$1; shift; fi
need=(loom loomd loom-worker)
[[ " $* " == *" --only-sim "* ]] && need=(loom)
for p in "${need[@]}"; do
  [ -x "$build/$p" ] || { echo "sim2slurm: no $p in $build (build first)" >&2; exit 2; }
done
exec python3 "$src/bench/sim2slurm.py" --build "$build" "$@"
