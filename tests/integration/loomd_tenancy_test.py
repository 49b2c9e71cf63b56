"""Tenant scope against a real loomd with tokens (docs/security.md, "Tenants"): a tenant's view
of job ids, of /v1/cluster and of placement decisions says nothing of other tenants' jobs."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, job_spec  # noqa: E402

build = sys.argv[1]
loomd = os.path.join(build, "loomd")


def token(data_dir, tenant, role="tenant"):
    p = subprocess.run([loomd, "token", "create", "--data-dir", data_dir, "--tenant", tenant,
                        "--role", role], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


d = Loomd(build, "--quiet")
admin = token(d.dir, "ops", "admin")
ta, tb = token(d.dir, "team-a"), token(d.dir, "team-b")
d.start()


def req(method, path, tok, body=None):
    return d.req(method, path, body=body, headers={"Authorization": "Bearer " + tok})


st, a1 = req("POST", "/v1/jobs", ta, job_spec("a1", iterations=0))
check(st == 201, "team-a submits a job")
bs = []
for i in range(5):
    # long rollouts, loose SLOs: they pack into groups of their own
    st, b = req("POST", "/v1/jobs", tb, job_spec(f"b{i}", t_roll=4, t_train=1, slo=3,
                                                 iterations=0))
    check(st == 201, f"team-b submits job {i + 1}")
    bs.append(b)
st, a2 = req("POST", "/v1/jobs?explain=1", ta, job_spec("a2", iterations=0))
check(st == 201, "team-a submits a second job, explained")

# -- ids --------------------------------------------------------------------------------------------
ids = sorted([a1["id"], a2["id"]] + [b["id"] for b in bs])
check(len(set(ids)) == 7 and all(i > 0 for i in ids), f"seven distinct ids ({ids})")
check(not set([a1["id"], a2["id"]]) & set(range(1, 8)) and ids != list(range(ids[0], ids[0] + 7)),
      f"ids are not loomd's sequence: team-a's {a1['id']}, {a2['id']} do not count team-b's")
check(a1["worker_token"].startswith(f"loom_w_{a1['id']}_"), "the worker token carries the same id")
st, lease = req("POST", f"/v1/jobs/{a1['id']}/phases/rollout/acquire?wait=5", a1["worker_token"])
check(st == 200 and lease["job"] == a1["id"], f"the worker token acquires by that id ({lease})")
st, _ = req("POST", f"/v1/leases/{lease['lease']}/release", a1["worker_token"])
check(st == 200, "and releases its lease")
st, l2 = req("POST", f"/v1/jobs/{a1['id']}/phases/train/acquire?wait=5", a1["worker_token"])
st, rel = req("POST", f"/v1/leases/{l2['lease']}/release", a1["worker_token"])
check(st == 200 and rel["released"] == l2["lease"], "a second lease, released by its id")
check(min(lease["lease"], l2["lease"]) > 1000 and abs(l2["lease"] - lease["lease"]) != 1,
      f"lease ids are not loomd's sequence either ({lease['lease']}, {l2['lease']})")
st, l3 = req("POST", f"/v1/jobs/{bs[0]['id']}/phases/rollout/acquire?wait=5", bs[0]["worker_token"])
check(st == 200, "a team-b worker holds a lease")
st, hb = req("POST", f"/v1/leases/{l3['lease']}/heartbeat", ta)
st2, hb2 = req("POST", f"/v1/leases/{l3['lease'] + 1}/heartbeat", ta)
check(st == st2 == 404 and hb["error"].replace(str(l3["lease"]), "N")
      == hb2["error"].replace(str(l3["lease"] + 1), "N"),
      "another tenant's lease answers as a missing one")
st, hb = req("POST", f"/v1/leases/{l3['lease']}/heartbeat", bs[0]["worker_token"])
check(st == 200 and hb["lease"] == l3["lease"], "its own worker renews it by the same id")
st, other = req("GET", f"/v1/jobs/{bs[0]['id']}", ta)
missing = next(i for i in range(12345, 99999) if i not in ids)
st2, none = req("GET", f"/v1/jobs/{missing}", ta)
check(st == st2 == 404 and other["error"].replace(str(bs[0]["id"]), "N")
      == none["error"].replace(str(missing), "N"),
      "another tenant's job answers as a missing one")
st, out = req("DELETE", f"/v1/jobs/{bs[0]['id']}", ta)
check(st == 404, "and cannot be cancelled")

# -- /v1/cluster ------------------------------------------------------------------------------------
st, groups = req("GET", "/v1/groups", admin)
mine = [g for g in groups["groups"] if a1["id"] in g["members"] or a2["id"] in g["members"]]
st, c = req("GET", "/v1/cluster", ta)
check(st == 200 and c["scope"] == "tenant" and c["jobs"] == 2 and c["groups"] == len(mine)
      and c["nodes"]["rollout"] == sum(len(g["rollout_nodes"]) for g in mine)
      and c["nodes"]["train"] == sum(len(g["train_nodes"]) for g in mine)
      and abs(c["cost_per_hour"] - sum(g["cost_per_hour"] for g in mine)) < 1e-6,
      f"a tenant's /v1/cluster counts its own jobs and groups ({c['jobs']} jobs, "
      f"{c['groups']} groups of {len(groups['groups'])})")
st, c = req("GET", "/v1/cluster", admin)
check(c["scope"] == "cluster" and c["jobs"] == 7 and c["groups"] == len(groups["groups"]),
      "admin's counts every job and group")

# -- ?explain=1 -------------------------------------------------------------------------------------
others = {g["id"] for g in groups["groups"]} - {g["id"] for g in mine}
check(len(others) > 0, f"team-b's jobs hold groups of their own ({len(others)})")
cands = a2["decision"]["candidates"]
named = {x["group"] for x in cands if x["group"] is not None}
check(cands and not named & others, f"no candidate names a group of team-b's alone ({named})")
redacted = [x for x in cands if x["rollout_nodes"] is None]
check(len(redacted) > 0 and all(x["t_meta_s"] is None and "job" not in x["why"]
                                and not any(ch.isdigit() for x in [x] for ch in x["why"])
                                for x in redacted),
      f"{len(redacted)} candidates in other tenants' groups keep their verdict, not their "
      f"group, nodes, members or numbers ({redacted[0] if redacted else None})")
st, full = req("GET", f"/v1/jobs/{a2['id']}", admin)
check({x["group"] for x in full["decision"]["candidates"]} & others,
      "admin sees the candidates in full")
st, again = req("GET", f"/v1/jobs/{a2['id']}", ta)
check(again["decision"]["candidates"] == cands, "GET of the job shows the same scoped decision")

# -- the timeline and a restart ----------------------------------------------------------------------
st, tl = req("GET", "/v1/timeline", ta)
check(st == 200 and {j["id"] for j in tl["jobs"]} == {a1["id"], a2["id"]}
      and all(e["job"] in (a1["id"], a2["id"]) for e in tl["events"]),
      "the timeline shows team-a's jobs by the same ids")
check(tl["events"] and all("seq" not in e and (e["kind"] != "submit" or e["reason"] == "")
                           for e in tl["events"]),
      "and no log sequence or core admission number, which count every tenant's jobs")
d.stop()
d.start()
st, j = req("GET", f"/v1/jobs/{a1['id']}", ta)
check(st == 200 and j["name"] == "a1", "ids are the same after a restart")
st, j = req("GET", f"/v1/jobs/{bs[1]['id']}", tb)
check(st == 200 and j["name"] == "b1", "team-b's too")
d.stop()
p = subprocess.run([loomd, "token", "rotate-secret", "--data-dir", d.dir], capture_output=True,
                   text=True)
check(p.returncode == 0, f"the store's secret is rotated ({p.stderr.strip()})")
d.start()
st, j = req("GET", f"/v1/jobs/{a1['id']}", ta)
check(st == 200 and j["name"] == "a1" and j["worker_token"] != a1["worker_token"]
      and j["worker_token"].startswith(f"loom_w_{a1['id']}_"),
      "after a rotation of the secret: the same ids, new worker tokens")
st, _ = req("GET", f"/v1/jobs/{a1['id']}", a1["worker_token"])
check(st == 401, "the old worker token is refused")
d.stop()

# -- without tokens: loomd's own ids ---------------------------------------------------------------
n = Loomd(build, "--quiet", "--insecure-loopback").start()
st, j = n.req("POST", "/v1/jobs", job_spec("x", iterations=0))
check(st == 201 and j["id"] == 1, "without tokens the first job is 1")
n.stop()
