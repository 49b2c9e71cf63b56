#!/usr/bin/env bash
# The fenced log on three real etcd members (docs/ha.md): fenced appends, a paused leader
# refused by the store, a watcher seeing each entry once in order, kill -9 of etcd's leader.
# $1: build directory, $2: source tree. Exit 77 (skipped) when etcd cannot start.
set -euo pipefail
build=$1 src=$2
[ -x "$build/ha_etcd_test" ] || { echo "SKIP: $build/ha_etcd_test not built"; exit 77; }
. "$src/tests/integration/ha_etcd_cluster.bash"
ha_etcd_start 23370
# shellcheck disable=SC2086
timeout 60 "$build/ha_etcd_test" "$ETCD_EPS" $ETCD_PIDS
