# Sourced by tests/integration/ha_etcd.sh and bench/ha_etcd.sh: starts three etcd members on
# loopback (client ports BASE+1..3, peer ports BASE+11..13) in their own temporary folder and
# kills them at exit. Sets ETCD_EPS (comma-separated client URLs) and ETCD_PIDS. Exits 77 when
# etcd is missing or does not come up.
ha_etcd_start() {
  local base=$1
  command -v etcd >/dev/null || { echo "SKIP: etcd not installed (scripts/deps.sh)"; exit 77; }
  HA_TMP=$(mktemp -d /tmp/loom-ha-etcd.XXXXXX)
  trap 'for p in $ETCD_PIDS; do kill -9 $p 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$HA_TMP"' EXIT
  local cl="" i
  for i in 1 2 3; do cl="$cl${cl:+,}e$i=http://127.0.0.1:$((base + 10 + i))"; done
  ETCD_EPS="" ETCD_PIDS=""
  for i in 1 2 3; do
    etcd --name e$i --data-dir "$HA_TMP/e$i" \
      --listen-client-urls http://127.0.0.1:$((base + i)) \
      --advertise-client-urls http://127.0.0.1:$((base + i)) \
      --listen-peer-urls http://127.0.0.1:$((base + 10 + i)) \
      --initial-advertise-peer-urls http://127.0.0.1:$((base + 10 + i)) \
      --initial-cluster "$cl" --initial-cluster-state new --initial-cluster-token loomha \
      >"$HA_TMP/e$i.log" 2>&1 &
    ETCD_PIDS="$ETCD_PIDS $!"
    ETCD_EPS="$ETCD_EPS${ETCD_EPS:+,}http://127.0.0.1:$((base + i))"
  done
  for _ in $(seq 1 100); do
    if ETCDCTL_API=3 etcdctl --endpoints="$ETCD_EPS" --command-timeout=1s endpoint health \
         >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.2
  done
  echo "SKIP: three etcd members did not come up in 20 s; last log lines:"
  tail -n 5 "$HA_TMP"/e*.log
  exit 77
}
