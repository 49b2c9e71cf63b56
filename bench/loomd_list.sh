#!/usr/bin/env bash
# What listing jobs costs the scheduler thread: N jobs submitted over 32 keep-alive connections,
# then GET /v1/jobs (one page under pagination), ?limit=100 and ?limit=1000, best of 5 each.
# Prints figures; never fails on timing. Usage: bench/loomd_list.sh BUILD_DIR [JOBS]
set -euo pipefail
b=${1:-build}
n=${2:-25600}
dir=$(mktemp -d /tmp/loomd-list-XXXXXX)
"$b/loomd" --data-dir "$dir" --listen 127.0.0.1:0 --port-file "$dir/port" --quiet \
  --insecure-loopback &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 500); do [ -s "$dir/port" ] && break; sleep 0.01; done
python3 - "$(cat "$dir/port")" "$n" <<'PY'
import http.client, json, sys, threading, time

port, n = int(sys.argv[1]), int(sys.argv[2])
spec = {"rollout_gpus": 8, "train_gpus": 8, "t_roll_s": 2, "t_train_s": 1, "slo": 1.5,
        "iterations": 0}


def submit(k):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for i in range(k):
        c.request("POST", "/v1/jobs", body=json.dumps(dict(spec, name=f"j{i}")))
        c.getresponse().read()


t0 = time.time()
ts = [threading.Thread(target=submit, args=(n // 32,)) for _ in range(32)]
[t.start() for t in ts]
[t.join() for t in ts]
print(f"submitted {n // 32 * 32} jobs in {time.time() - t0:.1f} s")
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
for path in ("/v1/jobs", "/v1/jobs?limit=100", "/v1/jobs?limit=1000"):
    best, size = 1e9, 0
    for _ in range(5):
        t = time.perf_counter()
        c.request("GET", path)
        size = len(c.getresponse().read())
        best = min(best, time.perf_counter() - t)
    print(f"GET {path}: {1000 * best:.1f} ms, {size / 1024:.0f} KiB")
PY
