#!/usr/bin/env bash
# Fenced-log figures on three local etcd members (docs/ha.md): append latency p50/p99 vs a
# SQLite fsync'd insert, and failover time p50/p99. Usage: bench/ha_etcd.sh BUILD_DIR
# [APPENDS [ROUNDS]]. Prints figures; never fails on timing.
set -euo pipefail
build=${1:?usage: bench/ha_etcd.sh BUILD_DIR [APPENDS [ROUNDS]]}
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/tests/integration/ha_etcd_cluster.bash"
ha_etcd_start 23470
"$build/ha_etcd_bench" "$ETCD_EPS" "${2:-200}" "${3:-20}"
