"""Lone members colocated on their training nodes against a real loomd (docs/scheduling.md,
"Lone members"):

- a policy file with a non-boolean policy.colocate_lone is refused naming the field and line;
- A alone: its group provisions no rollout node (/v1/cluster), its rollout lease names the
  training pool and the group's training node;
- B joins: it pays for A's planned rollout node, which is provisioned; B's rollout and A's next
  one run on the rollout pool;
- B is cancelled: A's rollout node is released and its next rollout is on the training pool;
- kill -9 and restart: the same groups, nodes and pools;
- a loomd started with colocate_lone off refuses the data dir (another policy).
"""

import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, job_spec  # noqa: E402

build, source = sys.argv[1], sys.argv[2]
loomd = os.path.join(build, "loomd")
tmp = tempfile.mkdtemp(prefix="loomd-lone-")
try:
    bad = os.path.join(tmp, "policy.json")
    with open(bad, "w") as f:
        f.write('{"cluster": {},\n "policy": {"colocate_lone": 1}}\n')
    p = subprocess.run([loomd, "--data-dir", tmp, "--cluster", bad], capture_output=True,
                       text=True)
    check(p.returncode == 1 and "policy.colocate_lone" in p.stderr and ":2:" in p.stderr,
          f"a bad policy.colocate_lone names the field and line ({p.stderr.strip()})")
    off = os.path.join(tmp, "off.json")
    with open(off, "w") as f:
        f.write('{"cluster": {}, "policy": {"colocate_lone": false}}\n')
except BaseException:
    shutil.rmtree(tmp, True)
    raise

d = Loomd(build, "--lease-timeout", "60", "--quiet").start()
st, aj = d.req("POST", "/v1/jobs", job_spec("A", 2.0, 1.0, 2.0, 0))
a = aj["id"]
check(st == 201 and "until a second member joins" in aj["decision"]["reason"],
      f"A opens a lone group: {aj['decision']['reason']}")
cl = d.req("GET", "/v1/cluster")[1]
check(cl["nodes"]["rollout"] == 0 and cl["nodes"]["train"] == 1
      and cl["policy"]["colocate_lone"] is True,
      f"no rollout node is provisioned for A alone ({cl['nodes']})")


def lease(jid, phase):
    st, le = d.req("POST", f"/v1/jobs/{jid}/phases/{phase}/acquire?wait=5")
    check(st == 200, f"job {jid} gets its {phase} lease ({st})")
    return le


def release(le):
    st, _ = d.req("POST", f"/v1/leases/{le['lease']}/release", {"status": "ok"})
    check(st == 200, f"lease {le['lease']} released ({st})")


le = lease(a, "rollout")
check(le["pool"] == "train" and le["nodes"] == aj["decision"]["train_nodes"],
      f"A's rollout runs on its training node: pool {le['pool']}, nodes {le['nodes']}")
release(le)
release(lease(a, "train"))

st, bj = d.req("POST", "/v1/jobs", job_spec("B", 1.0, 1.0, 2.0, 0))
b = bj["id"]
dec = bj["decision"]
check(st == 201 and dec["group"] == aj["decision"]["group"]
      and abs(dec["marginal_cost_per_hour"] - 14.80) < 1e-9,
      f"B joins A and pays for A's planned rollout node: {dec['reason']}")
cl = d.req("GET", "/v1/cluster")[1]
check(cl["nodes"]["rollout"] == 1, f"the rollout node is provisioned ({cl['nodes']})")


def drive(until):
    """Take and release permits as they come until until(seq) holds; (job, phase, pool)."""
    seq = []
    for _ in range(200):
        moved = False
        for jid in (a, b):
            job = d.req("GET", f"/v1/jobs/{jid}")[1]
            if not job["permit"]:
                continue
            ph = job["next_phase"]
            st, le = d.req("POST", f"/v1/jobs/{jid}/phases/{ph}/acquire?wait=1")
            if st != 200:
                continue
            seq.append((jid, ph, le["pool"], le["nodes"]))
            if until(seq):
                return seq, le
            release(le)
            moved = True
        check(moved, f"a permit is granted (after {seq})")
    check(False, "drive ended")


# A's rollout permitted while it was alone still runs on the training node; every rollout
# after that, B's and A's, is on the rollout node
seq, la = drive(lambda q: sum(1 for j, ph, _, _ in q if j == a and ph == "rollout") == 2)
rolls = [(j, pool, nodes) for j, ph, pool, nodes in seq if ph == "rollout"]
check(all(pool == "rollout" for j, pool, _ in rolls if j == b), f"B rolls out on the rollout pool")
check(rolls[-1] == (a, "rollout", dec["rollout_nodes"]),
      f"A's rollouts move to the rollout node: {rolls}")
st, _ = d.req("DELETE", f"/v1/jobs/{b}")
check(st in (200, 202, 204), f"B is cancelled ({st})")
check(d.req("GET", "/v1/cluster")[1]["nodes"]["rollout"] == 1,
      "A's running rollout keeps the node until it ends")
release(la)
cl = d.req("GET", "/v1/cluster")[1]
check(cl["nodes"]["rollout"] == 0, f"alone again, A's rollout node is released ({cl['nodes']})")
release(lease(a, "train"))
le = lease(a, "rollout")
check(le["pool"] == "train", f"A rolls out on its training node again ({le['pool']})")


def view():
    cl = d.req("GET", "/v1/cluster")[1]
    _, jobs = d.req("GET", "/v1/jobs")
    jobs = jobs["jobs"] if isinstance(jobs, dict) else jobs
    return (cl["nodes"], sorted((j["id"], j["group"], j["state"]) for j in jobs))


before = view()
d.kill9()
d.start()
after = view()
check(before == after, f"after kill -9 the same groups and nodes: {after}")
le = lease(a, "rollout")
check(le["pool"] == "train", f"after the restart A still rolls out on its training node")
release(le)
d.stop()

p = subprocess.run([loomd, "--data-dir", d.dir, "--cluster", off, "--quiet"],
                   capture_output=True, text=True, timeout=30)
check(p.returncode == 1 and "another policy" in p.stderr,
      f"colocate_lone off refuses the data dir ({p.stderr.strip()[:120]})")
shutil.rmtree(tmp, True)
print("loomd_lone: ok")
