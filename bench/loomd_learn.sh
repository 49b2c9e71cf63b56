#!/usr/bin/env bash
# What learned-profile admission costs loomd: the same work under --admission worst and p99,
# JOBS jobs (each alone in its group) run ITERS iterations each over one keep-alive connection
# (phases of ~0 s: the figure is loomd's own cost per released phase, which under p99 also logs
# an observation), then loomd is killed with SIGKILL and started again on its data dir: the
# restart replays the store's log, which under p99 holds two observations per iteration until
# compaction drops what the learned window has forgotten (docs/operations.md). p99 runs twice,
# with compaction (the default) and without (--compact-min 0), and each p99 store then runs
# 3 x ITERS more iterations and is restarted again: restart time must not grow with history.
# Prints figures (restart: best of 3); never fails on timing.
# Usage: bench/loomd_learn.sh BUILD_DIR [JOBS] [ITERS]
set -euo pipefail
b=${1:-build}
jobs=${2:-200}
iters=${3:-50}
root=$(mktemp -d /tmp/loomd-learn-bench-XXXXXX)
pid=
trap 'if [ -n "$pid" ]; then kill -9 $pid 2>/dev/null || true; fi; wait 2>/dev/null || true; rm -rf "$root"' EXIT

start() { # DIR MODE EXTRA: start loomd, wait for its port file; took = the seconds it needed
  rm -f "$1/port"
  local t0
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$b/loomd" --data-dir "$1" --listen 127.0.0.1:0 --port-file "$1/port" --quiet \
    --admission "$2" --lease-timeout 600 $3 </dev/null >/dev/null &
  pid=$!
  for _ in $(seq 6000); do [ -s "$1/port" ] && break; sleep 0.005; done
  took=$(echo "$(date +%s.%N) - $t0" | bc)
}

drive() { # PORT SUBMIT(0/1) ITERS: prints us per released phase
  python3 - "$1" "$jobs" "$3" "$2" <<'PY'
import http.client, json, sys, time

port, J, K, submit = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)


def req(method, path, body=None):
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if r.status >= 300:
        sys.exit(f"{method} {path}: {r.status} {data[:200]}")
    return json.loads(data) if data else None


# SLO 1.0 and training longer than rollout: no job can share a group.
if submit:
    ids = [req("POST", "/v1/jobs", {"name": f"j{i}", "rollout_gpus": 8, "train_gpus": 8,
                                    "t_roll_s": 1, "t_train_s": 2, "slo": 1.0})["id"]
           for i in range(J)]
else:
    ids, page = [], {"next": 0}
    while page["next"] is not None:  # the list comes in pages
        page = req("GET", "/v1/jobs?limit=1000" + (f"&after={page['next']}" if ids else ""))
        ids += [j["id"] for j in page["jobs"]]
t0 = time.perf_counter()
for _ in range(K):
    for j in ids:
        for ph in ("rollout", "train"):
            lease = req("POST", f"/v1/jobs/{j}/phases/{ph}/acquire?wait=5")
            req("POST", f"/v1/leases/{lease['lease']}/release", {"status": "ok"})
print(f"{(time.perf_counter() - t0) / (J * K * 2) * 1e6:.0f}")
PY
}

restart3() { # DIR MODE EXTRA: best of three kill -9 restarts -> best
  kill -9 $pid
  wait $pid 2>/dev/null || true
  local ts=()
  for _ in 1 2 3; do
    start "$1" "$2" "$3"
    ts+=("$took")
    kill -9 $pid
    wait $pid 2>/dev/null || true
  done
  best=$(printf '%s\n' "${ts[@]}" | sort -g | head -1)
}

entries() { # DIR: observe entries in its log
  python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(
\"SELECT count(*) FROM log WHERE kind='observe'\").fetchone()[0])" "$1/loom.db"
}

for run in worst p99-nocompact p99; do
  mode=${run%%-*}
  extra=""
  [ "$run" = p99-nocompact ] && extra="--compact-min 0"
  dir="$root/$run"
  mkdir -p "$dir"
  start "$dir" "$mode" "$extra"
  d=$(drive "$(cat "$dir/port")" 1 "$iters")
  restart3 "$dir" "$mode" "$extra"
  rows=$(entries "$dir")
  size=$(du -sk "$dir" | cut -f1)
  printf '%-13s %d jobs x %d iterations: %s us per released phase (acquire + release), ' \
    "$run" "$jobs" "$iters" "$d"
  printf '%d observe entries, store %d KiB, restart (replay) best of 3: %.3f s\n' \
    "$rows" "$size" "$best"
  key=${run//-/_}
  eval "drive_$key=$d restart_$key=$best rows_$key=$rows"
  if [ "$mode" = p99 ]; then
    start "$dir" "$mode" "$extra"
    drive "$(cat "$dir/port")" 0 $((3 * iters)) >/dev/null
    restart3 "$dir" "$mode" "$extra"
    rows=$(entries "$dir")
    printf '%-13s %d jobs x %d iterations: %d observe entries, restart best of 3: %.3f s\n' \
      "$run" "$jobs" $((4 * iters)) "$rows" "$best"
    eval "restart4_$key=$best"
  fi
done
echo "p99 / worst per released phase: $(echo "scale=2; $drive_p99 / $drive_worst" | bc)x"
echo "restart at $((jobs * iters)) job-iterations: worst $restart_worst s, p99 $restart_p99 s" \
  "(without compaction $restart_p99_nocompact s)"
echo "restart at $((4 * jobs * iters)) job-iterations: p99 $restart4_p99 s" \
  "(without compaction $restart4_p99_nocompact s): x$(echo "scale=2; $restart4_p99 / $restart_p99" | bc)" \
  "vs x$(echo "scale=2; $restart4_p99_nocompact / $restart_p99_nocompact" | bc) for 4x the history"
