#!/usr/bin/env bash
# Replicated loomd on three local etcd members (docs/ha.md). Usage:
#   bench/ha_loomd.sh BUILD_DIR cost [JOBS]         SQLite vs etcd: submits/s, permit grant
#                                                   p50/p99, identical placements (default 200)
#   bench/ha_loomd.sh BUILD_DIR failover [KILLS]     leader kill -9 to the next permit, p50/p99
#                                                   under live jobs (default 50)
#   bench/ha_loomd.sh BUILD_DIR campaign [FAULTS [SEED]]  leader kill / pause, etcd member kill;
#                                                   nothing lost (default 500)
# Prints figures; never fails on timing (campaign and cost exit 1 when something was lost or a
# placement differed).
set -euo pipefail
build=${1:?usage: bench/ha_loomd.sh BUILD_DIR cost|failover|campaign [N [SEED]]}
mode=${2:-failover}
case $mode in
cost) n=${3:-200} ;; failover) n=${3:-50} ;; campaign) n=${3:-500} ;;
*) echo "bench/ha_loomd.sh: unknown mode '$mode' (cost, failover or campaign)" >&2; exit 2 ;;
esac
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/tests/integration/ha_etcd_cluster.bash"
ha_etcd_start 23670
# etcd members the campaign restarted, loomd replicas and workers: all under $HA_TMP
trap 'pkill -9 -f "$HA_TMP" 2>/dev/null || true; for p in $ETCD_PIDS; do kill -9 $p 2>/dev/null || true; done; wait 2>/dev/null || true; [ -n "${LOOM_BENCH_KEEP:-}" ] || rm -rf "$HA_TMP"' EXIT
# shellcheck disable=SC2086
python3 "$src/bench/ha_loomd.py" "$build" "$src" "$ETCD_EPS" "$HA_TMP" "$mode" "$n" "${4:-1}" $ETCD_PIDS
