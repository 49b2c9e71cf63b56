#!/usr/bin/env bash
# What `make run` does: the most complete end-to-end thing loom can do. $1 is the build folder.
set -euo pipefail
b=${1:-build}
if "$b/loom" demo --help >/dev/null 2>&1; then
  exec "$b/loom" demo
fi
exec "$b/loom" place examples/temporal-mux.json
