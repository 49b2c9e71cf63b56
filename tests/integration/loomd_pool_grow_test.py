"""policy.pool_grow against a real loomd (docs/scheduling.md, "Training pools that grow").

With 50 ms switches, A and B (1 s rollout, 1 s training, SLO 2) share one training node; C (2.4 s
rollout, 0.6 s training, SLO 1) cannot run lone (3.1 s > 3.0 s) nor train in their pool as it
stands, and a group of its own would cost what the grown group costs per hour for a longer
iteration: it joins A and B, their pool grown to two training nodes.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, job_spec  # noqa: E402

build, source = sys.argv[1], sys.argv[2]
loomd, loom = os.path.join(build, "loomd"), os.path.join(build, "loom")
tmp = tempfile.mkdtemp(prefix="loomd-pool-grow-")


def policy_file(name, grow):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write('{"cluster": {},\n "policy": {"warm_switch_s": 0.05, "pool_grow": %s}}\n' % grow)
    return path


try:
    p = subprocess.run([loomd, "--data-dir", tmp, "--cluster", policy_file("bad.json", '"yes"')],
                       capture_output=True, text=True)
    check(p.returncode == 1 and "policy.pool_grow" in p.stderr and ":2:" in p.stderr,
          f"a pool_grow that is not a boolean names the field and line ({p.stderr.strip()})")
    on, off = policy_file("on.json", "true"), policy_file("off.json", "false")
except BaseException:
    shutil.rmtree(tmp, True)
    raise


def three(d):
    ids = []
    for name, roll, train, slo in (("A", 1.0, 1.0, 2.0), ("B", 1.0, 1.0, 2.0),
                                   ("C", 2.4, 0.6, 1.0)):
        st, j = d.req("POST", "/v1/jobs", job_spec(name, roll, train, slo, 50))
        check(st == 201, f"{name} admitted ({st} {j})")
        ids.append(j)
    return ids


d = Loomd(build, "--cluster", on, "--quiet").start()
cl = d.req("GET", "/v1/cluster")[1]
check(cl["policy"]["pool_grow"] is True, f"/v1/cluster echoes the policy ({cl['policy']})")
a, b, c = three(d)
check(b["decision"]["group"] == a["decision"]["group"], f"B joins A ({b['decision']['reason']})")
dec = c["decision"]
check(dec["group"] == a["decision"]["group"] and "grown by 1 to 2 nodes" in dec["reason"],
      f"C joins them, growing their pool: {dec['reason']}")
ja = d.req("GET", f"/v1/jobs/{a['id']}")[1]
check(len(ja["train_nodes"]) == 2, f"A trains on both nodes now ({ja['train_nodes']})")
cl = d.req("GET", "/v1/cluster")[1]
check(cl["nodes"]["train"] == 2, f"two training nodes provisioned ({cl['nodes']})")

env = dict(os.environ, LOOM_URL=f"http://127.0.0.1:{d.port}")
p = subprocess.run([loom, "job", str(c["id"])], capture_output=True, text=True, env=env,
                   timeout=30)
check(p.returncode == 0, f"loom job C ({p.stderr.strip()})")

d.kill9()
d.start()
after = d.req("GET", f"/v1/jobs/{a['id']}")[1]
check(after["group"] == ja["group"] and after["train_nodes"] == ja["train_nodes"],
      f"after kill -9 the pool is as it was ({after['train_nodes']})")
st, _ = d.req("DELETE", f"/v1/jobs/{c['id']}")
check(st in (200, 202), f"C cancelled ({st})")
cl = d.req("GET", "/v1/cluster")[1]
ja = d.req("GET", f"/v1/jobs/{a['id']}")[1]
check(cl["nodes"]["train"] == 1 and len(ja["train_nodes"]) == 1,
      f"C's departure shrinks the pool back to one node ({cl['nodes']}, {ja['train_nodes']})")
d.stop()
p = subprocess.run([loomd, "--data-dir", d.dir, "--cluster", off, "--quiet"],
                   capture_output=True, text=True, timeout=30)
check(p.returncode == 1 and "another policy" in p.stderr,
      f"a store that grew pools refuses a policy without growth ({p.stderr.strip()[:120]})")

d2 = Loomd(build, "--cluster", off, "--quiet").start()
a, b, c = three(d2)
check(c["decision"]["group"] != a["decision"]["group"] and c["decision"]["decision"] == "new_group",
      f"without growth C opens a group of its own ({c['decision']['reason']})")
d2.stop()
shutil.rmtree(tmp, True)
print("loomd_pool_grow: ok")
