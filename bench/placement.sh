#!/usr/bin/env bash
# Placement decision latency vs concurrent jobs (issue targets: p99 <= 1 ms at 2000 jobs,
# <= 20 ms at 100000, <= 64 MiB RSS at 100000; WEAVE Table 5 reports 591 ms at 2000).
# $1: build folder. Prints JSON lines; never fails on timing.
set -euo pipefail
b=${1:-build}
"$b/loom" bench placement
