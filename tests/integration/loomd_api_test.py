"""loomd's HTTP API against a real daemon: the job lifecycle, every kind of bad input (each
with its status code, each changing nothing), slow idle connections, SIGTERM."""

import json
import os
import socket
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, job_spec, weave_groups  # noqa: E402

build = sys.argv[1]
d = Loomd(build, "--cluster", weave_groups(), "--idle-timeout", "1", "--lease-timeout", "30",
          "--quiet").start()


def state():
    """Everything a bad request must leave unchanged (less what the clock moves: costs so far)."""
    _, jobs = d.req("GET", "/v1/jobs")
    _, groups = d.req("GET", "/v1/groups")
    _, cl = d.req("GET", "/v1/cluster")
    for j in jobs["jobs"]:
        j.pop("cost")
    cl.pop("cost_by_tenant")
    return json.dumps([jobs, groups, cl], sort_keys=True)


# -- lifecycle -----------------------------------------------------------------------------------
st, h = d.req("GET", "/healthz")
check(st == 200 and h["status"] == "ok", "healthz answers ok")
# SLOs of 2.5: a job in its last iterations takes a partner only where it can absorb the round
# the join adds (policy.join_wait; loomd tells the core each job's iterations)
st, a = d.req("POST", "/v1/jobs", job_spec("A", 2, 1, 2.5, 1))
check(st == 201 and a["id"] == 1 and a["decision"]["decision"] == "new_group",
      "first job: 201, id 1, new group")
st, b = d.req("POST", "/v1/jobs", job_spec("B", 1, 2, 2.5, 1))
check(st == 201 and b["decision"]["decision"] == "direct_pack" and b["group"] == a["group"],
      "second job packs into the first job's group")
check(b["rollout_nodes"] == a["rollout_nodes"], "both pinned to the same rollout node")
st, g = d.req("GET", "/v1/groups")
check(st == 200 and g["groups"][0]["members"] == [1, 2], "GET /v1/groups lists the members")
g0 = g["groups"][0]
check(g0["rollout_node_names"] == [None] * len(g0["rollout_nodes"]) and
      g0["train_node_names"] == [None] * len(g0["train_nodes"]),
      "without an executor the node names are null, one per node id")
st, cl = d.req("GET", "/v1/cluster")
check(st == 200 and cl["nodes"] == {"rollout": 1, "train": 1} and cl["cost_per_hour"] > 0,
      "GET /v1/cluster: one node per pool, $/h > 0")

st, l1 = d.req("POST", "/v1/jobs/1/phases/rollout/acquire?wait=1")
check(st == 200 and l1["phase"] == "rollout" and l1["nodes"] == a["rollout_nodes"],
      "A gets its rollout permit on its pinned node")
st, _ = d.req("POST", "/v1/jobs/2/phases/rollout/acquire?wait=0.2")
check(st == 204, "B's rollout waits behind A's on the shared node (204 after the wait)")
st, again = d.req("POST", "/v1/jobs/1/phases/rollout/acquire?wait=0")
check(st == 200 and again["lease"] == l1["lease"], "a repeated acquire returns the same lease")
st, e = d.req("POST", "/v1/jobs/1/phases/train/acquire?wait=0")
check(st == 409 and e["field"] == "phase", "acquiring train while holding rollout: 409")
st, p = d.req("POST", f"/v1/leases/{l1['lease']}/progress", {"done": 1, "total": 10})
check(st == 200 and p["action"] == "none", "progress below the tail threshold: none")
st, p = d.req("POST", f"/v1/leases/{l1['lease']}/progress", {"done": 9, "total": 10})
check(st == 200 and p["action"] == "migrate_tail" and p["keep_gpus"] >= 1,
      "progress past the threshold with B waiting: migrate_tail")
st, l2 = d.req("POST", "/v1/jobs/2/phases/rollout/acquire?wait=1")
check(st == 200 and l2["gpus"] < 8, "B's rollout starts on the GPUs A's tail freed")
st, hb = d.req("POST", f"/v1/leases/{l1['lease']}/heartbeat")
check(st == 200, "heartbeat renews a held lease")
st, r = d.req("POST", f"/v1/leases/{l1['lease']}/release", {"status": "ok"})
check(st == 200 and r["next_phase"] == "train", "release of A's rollout: train is next")
st, r2 = d.req("POST", f"/v1/leases/{l1['lease']}/release", {"status": "ok"})
check(st == 200 and r2["iterations_done"] == r["iterations_done"],
      "a retried release answers the same and changes nothing")
st, t1 = d.req("POST", "/v1/jobs/1/phases/train/acquire?wait=1")
check(st == 200 and t1["pool"] == "train", "A trains")
st, r = d.req("POST", f"/v1/leases/{t1['lease']}/release", {"status": "ok"})
check(st == 200 and r["state"] == "finished" and r["iterations_done"] == 1,
      "A finishes after its one iteration")
st, e = d.req("POST", "/v1/jobs/1/phases/rollout/acquire?wait=0")
check(st == 409 and e["field"] == "state", "acquire on a finished job: 409")
st, e = d.req("POST", f"/v1/leases/{t1['lease']}/progress", {"done": 1, "total": 2})
check(st == 410, "progress on an ended lease: 410")
st, c = d.req("DELETE", "/v1/jobs/2")
check(st == 200 and c["state"] == "cancelled", "DELETE cancels B")
st, e = d.req("POST", f"/v1/leases/{l2['lease']}/heartbeat")
check(st == 410 and e["state"] == "revoked", "B's lease is revoked")
st, c = d.req("DELETE", "/v1/jobs/1")
check(st == 409, "cancelling a finished job: 409")
st, cl = d.req("GET", "/v1/cluster")
check(cl["nodes"] == {"rollout": 0, "train": 0}, "no job left: every node released")

# idempotent submit
k = {"Idempotency-Key": "abc-1"}
st, x = d.req("POST", "/v1/jobs", job_spec("K", iterations=0), headers=k)
st2, y = d.req("POST", "/v1/jobs", job_spec("K", iterations=0), headers=k)
check(st == 201 and st2 == 200 and x["id"] == y["id"], "a submit retried with its key: same job")

# -- bad input: status and nothing changed ---------------------------------------------------------
before = state()
bad = [
    ("malformed JSON", "POST", "/v1/jobs", '{"rollout_gpus": 8,', 400, ""),
    ("not an object", "POST", "/v1/jobs", "[1,2]", 422, ""),
    ("empty body", "POST", "/v1/jobs", "", 400, ""),
    ("wrong type", "POST", "/v1/jobs", json.dumps(job_spec("W", t_roll="2")), 422, "t_roll_s"),
    ("missing field", "POST", "/v1/jobs",
     json.dumps({k: v for k, v in job_spec("M").items() if k != "train_gpus"}), 422,
     "train_gpus"),
    ("negative time", "POST", "/v1/jobs", json.dumps(job_spec("N", t_train=-1)), 422,
     "t_train_s"),
    ("negative iterations", "POST", "/v1/jobs", json.dumps(job_spec("I", iterations=-3)), 422,
     "iterations"),
    ("SLO < 1", "POST", "/v1/jobs", json.dumps(job_spec("S", slo=0.5)), 422, "slo"),
    ("unknown field", "POST", "/v1/jobs", json.dumps(job_spec("U", colour="red")), 422,
     "colour"),
    ("GPUs not a node multiple", "POST", "/v1/jobs", json.dumps(job_spec("G", rollout_gpus=5)),
     422, "rollout_gpus"),
    ("name not a string", "POST", "/v1/jobs", json.dumps(job_spec(7)), 422, "name"),
    ("working set too big", "POST", "/v1/jobs",
     json.dumps(job_spec("H", mem_rollout_gb=5000)), 422, "mem_rollout_gb"),
    ("unknown job", "GET", "/v1/jobs/999", None, 404, "id"),
    ("non-numeric job id", "GET", "/v1/jobs/abc", None, 404, "id"),
    ("unknown job acquire", "POST", "/v1/jobs/999/phases/rollout/acquire", "", 404, "id"),
    ("unknown phase", "POST", "/v1/jobs/3/phases/sync/acquire", "", 404, "phase"),
    ("bad wait", "POST", "/v1/jobs/3/phases/rollout/acquire?wait=-1", "", 422, "wait"),
    ("unknown lease", "POST", "/v1/leases/12345/heartbeat", "", 404, "lease"),
    ("progress without total", "POST", "/v1/leases/1/progress", '{"done": 1}', 422, "total"),
    ("progress done > total", "POST", "/v1/leases/1/progress", '{"done": 5, "total": 2}', 422,
     "done"),
    ("progress negative", "POST", "/v1/leases/1/progress", '{"done": -1, "total": 2}', 422,
     "done"),
    ("release bad status", "POST", "/v1/leases/1/release", '{"status": "meh"}', 422,
     "status"),
    ("unknown path", "GET", "/v2/nothing", None, 404, ""),
    ("wrong method", "PUT", "/v1/jobs", "{}", 405, ""),
    ("oversized body", "POST", "/v1/jobs", '{"name": "' + "x" * (1 << 20) + '"}', 413, ""),
]
for what, method, path, raw, want, field in bad:
    st, body = d.req(method, path, raw=raw)
    ok = st == want and isinstance(body, dict) and "error" in body and body.get("field") == field
    check(ok, f"{what}: {want} naming '{field}' (got {st} {str(body)[:80]})")
check(state() == before, "none of the bad requests changed anything")

# -- slowloris: an idle half-sent request is closed after the idle timeout -------------------------
s = socket.create_connection(("127.0.0.1", d.port))
s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n")
s.settimeout(10)
t0 = time.monotonic()
try:
    data = s.recv(1024)
    closed = data == b"" or data.startswith(b"HTTP/1.1 4")  # EOF, or an error then EOF
except ConnectionResetError:
    closed = True
except socket.timeout:
    closed = False
dt = time.monotonic() - t0
s.close()
check(closed and dt < 10, f"an idle half-sent request is closed by loomd (after {dt:.1f} s)")
st, _ = d.req("GET", "/healthz")
check(st == 200, "loomd still serves after the slow client")

# -- metrics --------------------------------------------------------------------------------------
st, m = d.req("GET", "/metrics")
lines = [x for x in m.splitlines() if x and not x.startswith("#")]
names = {x.split("{")[0].split(" ")[0] for x in lines}
for n in ["loom_jobs", "loom_groups", "loom_nodes", "loom_cost_per_hour",
          "loom_decisions_total", "loom_permit_latency_seconds_bucket",
          "loom_phase_duration_seconds_bucket", "loom_leases_total"]:
    check(n in names, f"/metrics has {n}")
check('loom_jobs{state="finished"} 1' in m and 'loom_jobs{state="cancelled"} 1' in m,
      "/metrics counts jobs by state")
check(all(len(x.rsplit(" ", 1)) == 2 and x.rsplit(" ", 1)[1].replace(".", "", 1).isdigit()
          for x in lines), "every sample line is NAME{LABELS} VALUE")

# -- SIGTERM ------------------------------------------------------------------------------------------
rc = d.stop()
check(rc == 0, "SIGTERM: loomd exits 0")
wal = os.path.join(d.dir, "loom.db-wal")
check(not os.path.exists(wal) or os.path.getsize(wal) == 0, "the store was closed cleanly")
db = sqlite3.connect(os.path.join(d.dir, "loom.db"))
check(db.execute("SELECT count(*) FROM jobs").fetchone()[0] == 3,
      "the store holds the three accepted jobs and no rejected one")
db.close()
