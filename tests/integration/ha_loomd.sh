#!/usr/bin/env bash
# loomd replicated on three real etcd members (docs/ha.md): three loomd replicas, live jobs
# driven by loom-worker, and kill -9 of the leader, SIGSTOP of the leader past its lease, a
# replica joining later and kill -9 of etcd's own leader; every job finishes with exactly its
# iterations. $1: build directory, $2: source tree. Exit 77 (skipped) when etcd cannot start.
set -euo pipefail
build=$1 src=$2
[ -x "$build/loomd" ] || { echo "SKIP: $build/loomd not built"; exit 77; }
. "$src/tests/integration/ha_etcd_cluster.bash"
ha_etcd_start 23570
# shellcheck disable=SC2086
timeout 300 python3 "$src/tests/integration/ha_loomd_test.py" "$build" "$src" "$ETCD_EPS" \
  "$HA_TMP" $ETCD_PIDS
