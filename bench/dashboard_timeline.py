"""GET /v1/timeline (the dashboard's poll) against the size of loomd's lease table.

One job runs phases back to back (acquire, release; no work) to fill the store's lease table;
at each size the endpoint is timed over 50 requests on one keep-alive connection, for a window
holding every lease and, after a pause, for a 1 s window holding none. The second figure is
the one a long-lived loomd sees with the dashboard's default window: it stays flat as the table
grows, because the store is read newest first and only back to the window's start."""

import http.client
import json
import os
import sys
import time

build, source = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(source, "tests", "integration"))
from loomd_harness import Loomd, job_spec  # noqa: E402

d = Loomd(build, "--quiet").start()
st, j = d.req("POST", "/v1/jobs", body=job_spec("bench", t_roll=1, t_train=1, iterations=0))
assert st == 201, j
c = http.client.HTTPConnection("127.0.0.1", d.port)


def call(method, path):
    c.request(method, path)
    r = c.getresponse()
    return r.status, r.read()


def timeline(window_s, n=50):
    t = time.perf_counter()
    for _ in range(n):
        st, body = call("GET", f"/v1/timeline?window_s={window_s}")
    assert st == 200, body
    return (time.perf_counter() - t) / n * 1e3, len(json.loads(body)["leases"]), len(body)


leases = 0
for target in (1000, 4000, 8000):
    while leases < target:
        for phase in ("rollout", "train"):
            st, body = call("POST", f"/v1/jobs/{j['id']}/phases/{phase}/acquire?wait=5")
            call("POST", f"/v1/leases/{json.loads(body)['lease']}/release")
            leases += 1
    ms_all, n_all, size = timeline(3600)
    time.sleep(1.2)
    ms_none, n_none, _ = timeline(1)
    print(f"{leases:5d} leases in the store: window holding all {ms_all:7.2f} ms "
          f"({n_all} leases, {size / 1024:.0f} KiB); 1 s window {ms_none:5.2f} ms "
          f"({n_none} leases)")
d.stop()
