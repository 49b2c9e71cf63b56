"""Quotas per tenant and paginated job lists against a real loomd (docs/operations.md,
"Quotas"; docs/api.md). Tenants come from tokens created before loomd starts; the quota table
is the "quotas" object of the --cluster file."""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, job_spec  # noqa: E402

build = sys.argv[1]
loomd = os.path.join(build, "loomd")
tmp = tempfile.mkdtemp(prefix="loomd-quota-")

# H20 rollout GPUs at $1.85/h and H800 training GPUs at $5.28/h (the default cluster): a job of
# 8 + 8 GPUs is charged 8 x 1.85 + 8 x 5.28 = $57.04/h.
quotas = {
    "default": {"jobs": 2},
    "tenants": {
        "team-a": {"jobs": 3, "gpus": {"train": 24}, "cost_per_hour": 200},
        "team-c": {"nodes": {"rollout": 1}},
        "ops": {"jobs": None},
    },
}
cluster = os.path.join(tmp, "cluster.json")
with open(cluster, "w") as f:
    json.dump({"cluster": {}, "quotas": quotas}, f, indent=1)


def token(data_dir, tenant, role="tenant"):
    p = subprocess.run([loomd, "token", "create", "--data-dir", data_dir, "--tenant", tenant,
                        "--role", role], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


d = Loomd(build, "--quiet", "--cluster", cluster)
admin = token(d.dir, "ops", "admin")
ta, tb, tc = token(d.dir, "team-a"), token(d.dir, "team-b"), token(d.dir, "team-c")
d.start()


def req(method, path, tok, body=None):
    return d.req(method, path, body=body, headers={"Authorization": "Bearer " + tok})


def state(tok):
    """What a refusal must leave as it was: the caller's jobs and the whole cluster (less what
    the clock moves: a job's cost so far)."""
    jobs = req("GET", "/v1/jobs?limit=1000", tok)[1]
    for j in jobs["jobs"]:
        j.pop("cost")
    return (jobs, req("GET", "/v1/cluster", admin)[1]["jobs"], req("GET", "/v1/groups", admin)[1])


# -- jobs ------------------------------------------------------------------------------------------
ids = []
for i in range(3):
    st, j = req("POST", "/v1/jobs", ta, job_spec(f"a{i}", iterations=0))
    check(st == 201, f"team-a's job {i + 1} of 3 is admitted ({st} {j})")
    ids.append(j["id"])
before = state(ta)
st, out = req("POST", "/v1/jobs", ta, job_spec("a3", iterations=0))
check(st == 429 and out["field"] == "quota" and out["quota"]["name"] == "jobs"
      and out["quota"]["used"] == 3 and out["quota"]["limit"] == 3
      and "jobs 3/3" in out["error"] and "team-a" in out["error"],
      f"the 4th job: 429 naming the jobs quota, used/limit 3/3 ({st} {out})")
check(state(ta) == before, "the refused submit changed nothing (jobs, cluster, groups)")
st, out = req("POST", "/v1/jobs", ta, job_spec("a3", iterations=0))
check(st == 429, "refused again: a refusal does not count as a job")

# -- the job alone over a limit: 403 --------------------------------------------------------------
st, _ = req("DELETE", f"/v1/jobs/{ids[0]}", ta)
check(st == 200, "team-a cancels a job")
st, out = req("POST", "/v1/jobs", ta, job_spec("big", train_gpus=32, iterations=0))
check(st == 403 and out["quota"]["name"] == "gpus_train" and out["quota"]["limit"] == 24
      and out["quota"]["asked"] == 32 and "never fit" in out["error"],
      f"a job asking 32 training GPUs under a limit of 24: 403 ({st} {out})")
st, out = req("POST", "/v1/jobs", ta, job_spec("a4", train_gpus=16, iterations=0))
check(st == 429 and out["quota"]["name"] == "gpus_train" and out["quota"]["used"] == 16,
      f"16 in use + 16 asked over 24 training GPUs: 429 ({st} {out})")
st, j = req("POST", "/v1/jobs", ta, job_spec("a4", iterations=0))
check(st == 201, "a cancelled job frees its share: the next 8+8 job fits")
ids.append(j["id"])

# -- dollars per hour -------------------------------------------------------------------------------
# 3 jobs x $57.04/h = $171.12/h in use; the jobs quota is full first, so lift it by cancelling
st, _ = req("DELETE", f"/v1/jobs/{ids[1]}", ta)
st, out = req("POST", "/v1/jobs", ta, job_spec("dear", rollout_gpus=16, iterations=0))
# 2 x 57.04 + (16 x 1.85 + 8 x 5.28) = 114.08 + 71.84 = 185.92 <= 200: admitted
check(st == 201, f"$185.92/h of $200/h fits ({st} {out})")
ids.append(out["id"])
st, _ = req("DELETE", f"/v1/jobs/{ids[2]}", ta)
st, out = req("POST", "/v1/jobs", ta, job_spec("dearer", rollout_gpus=24, iterations=0))
check(st == 429 and out["quota"]["name"] == "cost_per_hour"
      and abs(out["quota"]["used"] - 128.88) < 0.01 and out["quota"]["limit"] == 200
      and "US$/h" in out["error"],
      f"$128.88/h in use + $86.64/h asked over $200/h: 429 on cost_per_hour ({st} {out})")

# -- nodes, and the default for tenants not listed ---------------------------------------------------
st, j = req("POST", "/v1/jobs", tc, job_spec("c0", rollout_gpus=8, iterations=0))
check(st == 201, "team-c's first rollout node")
st, out = req("POST", "/v1/jobs", tc, job_spec("c1", rollout_gpus=8, iterations=0))
check(st == 429 and out["quota"]["name"] == "nodes_rollout", f"team-c's second: 429 ({out})")
for i in range(2):
    st, _ = req("POST", "/v1/jobs", tb, job_spec(f"b{i}", iterations=0))
    check(st == 201, f"team-b (not listed: the default, 2 jobs) job {i + 1}")
st, out = req("POST", "/v1/jobs", tb, job_spec("b2", iterations=0))
check(st == 429 and out["quota"]["name"] == "jobs" and out["quota"]["limit"] == 2,
      "team-b's third: the default's limit")

# -- /v1/cluster ------------------------------------------------------------------------------------
st, c = req("GET", "/v1/cluster", ta)
q = c["quotas"]
check(st == 200 and q["tenant"] == "team-a" and q["used"]["jobs"] == 2
      and q["limits"]["jobs"] == 3 and q["limits"]["gpus"]["train"] == 24
      and q["limits"]["gpus"]["rollout"] is None and q["limits"]["cost_per_hour"] == 200
      and q["refused"]["jobs"] == 2, f"a tenant sees its own usage and limits ({q})")
check("tenants" not in q, "a tenant does not see other tenants' quotas")
st, c = req("GET", "/v1/cluster", admin)
names = {t["tenant"]: t for t in c["quotas"]["tenants"]}
check(st == 200 and {"team-a", "team-b", "team-c", "ops"} <= set(names)
      and names["team-b"]["used"]["jobs"] == 2 and c["quotas"]["default"]["jobs"] == 2
      and names["ops"]["limits"]["jobs"] is None,
      f"admin sees every tenant's usage and the default ({sorted(names)})")

# -- /metrics ---------------------------------------------------------------------------------------
st, m = req("GET", "/metrics", admin)
check('loom_tenant_jobs{tenant="team-a"} 2' in m and
      'loom_tenant_gpus{tenant="team-a",pool="train"} 16' in m and
      'loom_tenant_quota_limit{tenant="team-a",quota="jobs"} 3' in m and
      'loom_quota_refusals_total{tenant="team-a",quota="jobs"} 2' in m and
      'loom_quota_refusals_total{tenant="team-b",quota="jobs"} 1' in m,
      "usage, limits and refusals by tenant in /metrics")
labels = set(re.findall(r'[{,]([a-z_]+)="', m))
check("job" not in labels and "instance" not in labels, f"no label named job or instance ({labels})")

# -- usage survives a restart (recounted from the store) -------------------------------------------
d.stop()
d.start()
st, c = req("GET", "/v1/cluster", ta)
check(c["quotas"]["used"]["jobs"] == 2 and abs(c["quotas"]["used"]["cost_per_hour"] - 128.88) < 0.01,
      f"after a restart the usage is recounted from the jobs ({c['quotas']['used']})")

# -- pages ------------------------------------------------------------------------------------------
for i in range(120):
    st, _ = req("POST", "/v1/jobs", admin, job_spec(f"p{i}", iterations=0))
    assert st == 201, st
st, page = req("GET", "/v1/jobs", admin)
check(st == 200 and len(page["jobs"]) == 100 and page["next"] is not None,
      "the default page holds 100 jobs and names the next")
seen, after, pages = [], None, 0
while True:
    st, page = req("GET", "/v1/jobs?limit=7" + (f"&after={after}" if after else ""), admin)
    assert st == 200, page
    seen += [j["id"] for j in page["jobs"]]
    pages += 1
    after = page["next"]
    if after is None:
        break
    check(after == page["jobs"][-1]["id"], "next is the last id of the page") if pages == 1 else None
total = req("GET", "/v1/cluster", admin)[1]
# 120 here, and before: team-a 5, team-b 2, team-c 1
check(len(seen) == len(set(seen)) == 128 and pages == (128 + 6) // 7,
      f"pages of 7 walk every job once ({len(seen)} ids in {pages} pages)")
st, page = req("GET", "/v1/jobs?limit=1000&state=live", ta)
check(st == 200 and len(page["jobs"]) == 2 and page["next"] is None
      and all(j["state"] in ("queued", "running") for j in page["jobs"]),
      "?state=live: a tenant's live jobs only")
groups, after = [], None
while True:
    st, page = req("GET", "/v1/groups?limit=5" + (f"&after={after}" if after is not None else ""),
                   admin)
    assert st == 200, page
    groups += [g["id"] for g in page["groups"]]
    after = page["next"]
    if after is None:
        break
n_groups = req("GET", "/v1/cluster", admin)[1]["groups"]
check(len(groups) == len(set(groups)) == n_groups and groups == sorted(groups) and 0 in groups,
      f"/v1/groups pages of 5 walk every group once, group 0 included ({n_groups} groups)")
st, out = req("GET", "/v1/groups?limit=0", admin)
check(st == 422 and out["field"] == "limit", "/v1/groups?limit=0: 422")
for bad, field in (("limit=0", "limit"), ("limit=1001", "limit"), ("limit=x", "limit"),
                   ("after=-1", "after"), ("state=done", "state")):
    st, out = req("GET", "/v1/jobs?" + bad, admin)
    check(st == 422 and out["field"] == field, f"?{bad}: 422 naming {field}")

# Listing every job used to hold the scheduler thread for the whole table; a page costs a page.
t0 = time.monotonic()
st, page = req("GET", "/v1/jobs?limit=1000", admin)
print(f"     one page of {len(page['jobs'])} jobs: {1000 * (time.monotonic() - t0):.1f} ms")
d.stop()

# -- a bad quota table stops loomd at start ---------------------------------------------------------
for body, needle in (({"default": {"jobs": -1}}, "quotas.default.jobs"),
                     ({"tenants": {"x": {"gpus": {"decode": 8}}}}, "quotas.tenants.x.gpus.decode"),
                     ({"tenants": {"bad name": {}}}, "quotas.tenants.bad name"),
                     ({"default": {"cpus": 1}}, "quotas.default.cpus")):
    path = os.path.join(tmp, "bad.json")
    with open(path, "w") as f:
        json.dump({"cluster": {}, "quotas": body}, f, indent=1)
    p = subprocess.run([loomd, "--quiet", "--insecure-loopback", "--data-dir",
                        os.path.join(tmp, "bad"), "--cluster", path, "--listen", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=20)
    check(p.returncode == 1 and needle in p.stderr and re.search(r"bad\.json:\d+:\d+", p.stderr),
          f"refused at start, naming {needle} and its line ({p.stderr.strip()})")
