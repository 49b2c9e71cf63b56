#!/usr/bin/env bash
# loomd under load on loopback: 10,000 job submissions over 32 keep-alive connections, then
# 1,000 concurrent long-poll acquires held open while acquire-to-grant latency is measured
# (a) when the job's resource is free (the permit is already there) and (b) when a waiting
# long-poll is woken because its group-mate released the node. Prints figures; never fails on
# timing. Usage: bench/loomd.sh BUILD_DIR [SUBMISSIONS] [LONGPOLLS]
# LOOMD_BENCH_AUTH=1: every request carries an admin bearer token (token lookup per request).
set -euo pipefail
b=${1:-build}
n=${2:-10000}
polls=${3:-1000}
dir=$(mktemp -d /tmp/loomd-bench-XXXXXX)
token=""
if [ "${LOOMD_BENCH_AUTH:-0}" = 1 ]; then
  token=$("$b/loomd" token create --data-dir "$dir" --tenant bench --role admin 2>/dev/null)
  echo "with an admin bearer token on every request"
fi
export LOOMD_BENCH_TOKEN=$token
"$b/loomd" --data-dir "$dir" --listen 127.0.0.1:0 --port-file "$dir/port" --quiet \
  --lease-timeout 600 --max-wait 600 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 500); do [ -s "$dir/port" ] && break; sleep 0.01; done
python3 - "$(cat "$dir/port")" "$n" "$polls" <<'PY'
import asyncio, json, os, statistics, sys, time

port, N, POLLS = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
TOKEN = os.environ.get("LOOMD_BENCH_TOKEN", "")
AUTH = f"Authorization: Bearer {TOKEN}\r\n" if TOKEN else ""


class Conn:
    """A minimal HTTP/1.1 keep-alive client."""

    async def open(self):
        self.r, self.w = await asyncio.open_connection("127.0.0.1", port, limit=1 << 24)
        return self

    async def req(self, method, path, body=b""):
        self.w.write(f"{method} {path} HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
                     f"{AUTH}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.r.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        data = await self.r.readexactly(length) if length else b""
        return status, json.loads(data) if data else None

    def close(self):
        self.w.close()


def spec(i):
    # WEAVE Type-A pairs: a rollout-heavy and a training-heavy job fill each other's bubbles.
    roll, train = (200, 100) if i % 2 == 0 else (100, 200)
    return json.dumps({"name": f"j{i}", "rollout_gpus": 8, "train_gpus": 8, "t_roll_s": roll,
                       "t_train_s": train, "slo": 1.5, "iterations": 0}).encode()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


async def main():
    # 1. submissions
    conns = [await Conn().open() for _ in range(32)]
    ids = []

    async def submitter(c, k):
        for i in range(k, N, len(conns)):
            st, body = await c.req("POST", "/v1/jobs", spec(i))
            assert st == 201, (st, body)
            ids.append(body["id"])

    t0 = time.perf_counter()
    await asyncio.gather(*(submitter(c, k) for k, c in enumerate(conns)))
    dt = time.perf_counter() - t0
    print(f"submissions: {N} in {dt:.2f} s = {N / dt:.0f} submissions/s "
          f"(32 connections, each reply after its commit)")

    # 2. who waits, who holds a permit; pair each waiter with a group-mate holding the node
    groups, after = {"groups": []}, ""
    while True:  # pages, as the job list below
        st, page = await conns[0].req("GET", "/v1/groups?limit=1000" + after)
        groups["groups"] += page["groups"]
        if page["next"] is None:
            break
        after = f"&after={page['next']}"
    permit, after = {}, ""
    while True:  # the list comes in pages
        st, jobs = await conns[0].req("GET", "/v1/jobs?limit=1000" + after)
        permit.update({j["id"]: j["permit"] for j in jobs["jobs"]})
        if jobs["next"] is None:
            break
        after = f"&after={jobs['next']}"
    pairs = []
    for g in groups["groups"]:
        holders = [m for m in g["members"] if permit[m]]
        waiters = [m for m in g["members"] if not permit[m]]
        if holders and waiters:
            pairs.append((holders[0], waiters[0]))
    print(f"groups: {len(groups['groups'])}; jobs waiting behind a group-mate: {len(pairs)}")
    polls = pairs[:POLLS]
    free = [j for j, p in permit.items() if p and j not in {h for h, _ in polls}][:2000]

    # 3. hold POLLS long-polls open
    poll_conns = [await Conn().open() for _ in polls]
    woke = {}

    async def longpoll(c, job):
        st, body = await c.req("POST", f"/v1/jobs/{job}/phases/rollout/acquire?wait=600")
        woke[job] = (time.perf_counter(), st)

    tasks = [asyncio.create_task(longpoll(c, w)) for c, (_, w) in zip(poll_conns, polls)]
    await asyncio.sleep(1.0)
    st, m = await conns[0].req("GET", "/healthz")
    pending = sum(1 for t in tasks if not t.done())
    print(f"long-polls held open: {pending} of {len(polls)}")

    # 4. acquire-to-grant with the resource free, while the long-polls are pending
    lat = []
    for job in free:
        t = time.perf_counter()
        st, body = await conns[0].req("POST", f"/v1/jobs/{job}/phases/rollout/acquire?wait=5")
        lat.append((time.perf_counter() - t) * 1e3)
        assert st == 200, (st, body)
    print(f"acquire-to-grant, resource free ({len(lat)} acquires, {pending} long-polls pending): "
          f"p50 {statistics.median(lat):.3f} ms, p99 {pct(lat, 99):.3f} ms, "
          f"max {max(lat):.3f} ms")

    # 5. wake-up: the holder takes and releases its rollout; the waiter's long-poll is granted
    wake = []
    for holder, waiter in polls[:500]:
        st, lease = await conns[0].req("POST", f"/v1/jobs/{holder}/phases/rollout/acquire?wait=5")
        assert st == 200, (st, lease)
        t = time.perf_counter()
        st, _ = await conns[0].req("POST", f"/v1/leases/{lease['lease']}/release",
                                   b'{"status":"ok"}')
        for _ in range(1000):
            if waiter in woke:
                break
            await asyncio.sleep(0.0002)
        if waiter in woke and woke[waiter][1] == 200:
            wake.append((woke[waiter][0] - t) * 1e3)
    if wake:
        print(f"release-to-grant of a waiting long-poll ({len(wake)} wake-ups): "
              f"p50 {statistics.median(wake):.3f} ms, p99 {pct(wake, 99):.3f} ms")
    c = await Conn().open()
    c.w.write(b"GET /metrics HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
    text = (await c.r.read()).decode()
    for line in text.splitlines():
        if line.startswith(("loom_permit_latency_seconds_count", "loom_store_commits_total",
                            "loom_http_requests_total")):
            print(f"loomd /metrics: {line}")
    for t in tasks:
        t.cancel()
    for c in conns + poll_conns:
        c.close()

asyncio.run(main())
PY
