"""`loom` operating a live loomd over HTTPS with tokens (docs/operations.md, "A day with loom").

loomd runs with a certificate made here by openssl and three tokens (an admin, tenants team-a
and team-b). Each check runs the real `loom` program as an operator would, with the environment
its --help documents (LOOM_URL, LOOM_TOKEN, LOOM_TOKEN_FILE, LOOM_CA_FILE) or the flags, and
asserts what it prints and its exit status: 0 done, 1 invalid input or loomd said no, 2 bad
usage, 3 loomd unreachable (TLS included), 4 no valid token or a role that may not."""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check  # noqa: E402

build, source = sys.argv[1], sys.argv[2]
loom, loomd = os.path.join(build, "loom"), os.path.join(build, "loomd")
tmp = tempfile.mkdtemp(prefix="loom-ctl-")


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True, cwd=tmp)


ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
for ca in ("ca", "other-ca"):
    sh("openssl", "req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "1",
       "-subj", f"/CN={ca}")
sh("openssl", "req", *ec, "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1")
with open(os.path.join(tmp, "san.ext"), "w") as f:
    f.write("subjectAltName=IP:127.0.0.1\n")
sh("openssl", "x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
   "-CAcreateserial", "-out", "srv.pem", "-days", "1", "-extfile", "san.ext")
ca, other_ca = os.path.join(tmp, "ca.pem"), os.path.join(tmp, "other-ca.pem")

# Jobs stay queued: nobody runs their workers, and the lease timeout outlasts the test. team-b
# may run two jobs at once.
cluster = os.path.join(tmp, "cluster.json")
with open(cluster, "w") as f:
    json.dump({"cluster": {}, "quotas": {"tenants": {"team-b": {"jobs": 2}}}}, f)
d = Loomd(build, "--quiet", "--lease-timeout", "600", "--cluster", cluster, "--tls-cert",
          os.path.join(tmp, "srv.pem"), "--tls-key", os.path.join(tmp, "srv.key"))


def token(tenant, role="tenant"):
    p = subprocess.run([loomd, "token", "create", "--data-dir", d.dir, "--tenant", tenant,
                        "--role", role], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


admin, ta, tb = token("ops", "admin"), token("team-a"), token("team-b")
d.start()
url = f"https://127.0.0.1:{d.port}"
base_env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
base_env.update(LOOM_URL=url, LOOM_CA_FILE=ca)


def run(tok, *args, env=None, stdin=None):
    e = dict(base_env)
    if tok:
        e["LOOM_TOKEN"] = tok
    e.update(env or {})
    p = subprocess.run([loom, *args], capture_output=True, text=True, env=e, input=stdin,
                       timeout=60)
    return p.returncode, p.stdout, p.stderr


def js(tok, *args):
    rc, out, err = run(tok, *args, "-o", "json")
    assert rc == 0, f"loom {' '.join(args)}: {rc} {err}"
    return json.loads(out)


# -- help: the environment and the exit status are documented --------------------------------------
rc, out, _ = run(None, "--help")
check(rc == 0 and "LOOM_URL" in out and "LOOM_CA_FILE" in out and "Exit status" in out
      and "loom submit" in out, "`loom --help` documents the client commands, environment, exit status")
rc, out, _ = run(None, "jobs", "--help")
check(rc == 0 and "--server URL" in out, "`loom jobs --help`")

# -- submit: a job file as loomd takes it, flags, a dry run ------------------------------------------
spec_a = {"name": "math-7b", "rollout_gpus": 8, "train_gpus": 8, "t_roll_s": 240,
          "t_train_s": 120, "slo": 1.5, "model_b": 7, "iterations": 100}
job_file = os.path.join(tmp, "math.json")
with open(job_file, "w") as f:
    json.dump(spec_a, f, indent=2)

before = js(admin, "jobs")["jobs"]
rc, out, err = run(ta, "submit", "--dry-run", job_file)
check(rc == 0 and "dry run: nothing was submitted" in out and "CANDIDATE" in out
      and "new_group" in out, f"submit --dry-run shows the placement and its candidates\n{out}")
check(js(admin, "jobs")["jobs"] == before, "a dry run leaves no job behind")

rc, out, err = run(ta, "submit", job_file)
check(rc == 0 and "math-7b" in out and "placement" in out, f"submit a job file (table)\n{out}{err}")
a = js(ta, "jobs")["jobs"]
check(len(a) == 1 and a[0]["name"] == "math-7b" and a[0]["tenant"] == "team-a",
      "team-a's job belongs to team-a")
a_id = a[0]["id"]

b = js(tb, "submit", "--name", "code-1b", "--rollout-gpus", "8", "--train-gpus", "8",
       "--t-roll", "60", "--t-train", "30", "--slo", "2", "--iterations", "10")
check(b["name"] == "code-1b" and b["tenant"] == "team-b" and b["decision"]["decision"]
      and b["worker_token"].startswith("loom_w_"), "submit from flags (-o json: the whole reply)")
b_id = b["id"]
c_ = js(tb, "submit", job_file, "--name", "override", "--iterations", "3")
check(c_["name"] == "override" and c_["iterations"] == 3 and c_["spec"]["t_roll_s"] == 240,
      "flags override a job file's fields")

# -- quotas: a dry run over quota says so, and is not counted as a refused submit -----------------
rc, _, err = run(tb, "submit", "--dry-run", job_file)
check(rc == 1 and "quota exceeded" in err and "jobs 2/2" in err,
      f"a dry run over quota: exit 1 naming the quota ({err.strip()})")
rc, _, err = run(tb, "submit", job_file)
check(rc == 1 and "quota exceeded" in err, "the submit over quota: exit 1")
check(js(tb, "cluster")["quotas"]["refused"] == {"jobs": 1},
      "only the real submit counts as refused")

# -- job files that are wrong: file:line:column, exit 1 ---------------------------------------------
bad = os.path.join(tmp, "bad.json")
with open(bad, "w") as f:
    f.write('{\n  "name": "x",\n  "rollout_gpus": 8,\n  "train_gpus": 8,\n  "t_roll_s": 1,\n'
            '  "t_train_s": 1,\n  "slo": 0.5\n}\n')
rc, _, err = run(ta, "submit", bad)
check(rc == 1 and f"{bad}:7:" in err and "slo" in err,
      f"an invalid field is reported at the file's line and column ({err.strip()})")
with open(bad, "w") as f:
    f.write('{"name": "x",\n "slo": 1.5,,\n}\n')
rc, _, err = run(ta, "submit", bad)
check(rc == 1 and f"{bad}:2:" in err, f"malformed JSON: file:line:column ({err.strip()})")
rc, _, err = run(ta, "submit", "-", stdin='{"name": "x", "rollout_gpus": 8,\n "train_gpus": 8, '
                 '"t_roll_s": 1, "t_train_s": 1,\n "slo": 0.5}')
check(rc == 1 and "(stdin):3:" in err and "slo" in err, f"... and of stdin ({err.strip()})")
rc, _, err = run(ta, "submit", os.path.join(tmp, "missing.json"))
check(rc == 1 and "missing.json" in err, f"a missing file is named ({err.strip()})")
huge = dict(spec_a, name="huge", mem_rollout_gb=5000)
rc, out, err = run(ta, "submit", "-", stdin=json.dumps(huge))
check(rc == 1 and "host memory" in err and "rejected" in err,
      f"an unplaceable job: exit 1 and the rejected decision ({err.strip()})")

# -- what each role sees --------------------------------------------------------------------------
ids_a = [j["id"] for j in js(ta, "jobs")["jobs"]]
ids_b = [j["id"] for j in js(tb, "jobs")["jobs"]]
ids_all = [j["id"] for j in js(admin, "jobs")["jobs"]]
check(ids_a == [a_id] and sorted(ids_b) == sorted([b_id, c_["id"]]),
      "each tenant lists its own jobs only")
check(sorted(ids_all) == sorted([a_id, b_id, c_["id"]]), "admin lists every tenant's jobs")
rc, out, _ = run(ta, "jobs")
check(rc == 0 and "math-7b" in out and "code-1b" not in out and "STATE" in out,
      f"the table of team-a's jobs\n{out}")
only_b = [j["id"] for j in js(admin, "jobs", "--tenant", "team-b")["jobs"]]
check(sorted(only_b) == sorted([b_id, c_["id"]]), "admin: jobs --tenant filters")
check(js(admin, "jobs", "--state", "finished")["jobs"] == [], "jobs --state finished: none yet")
g_a = a[0]["group"]
in_g = [j["id"] for j in js(admin, "jobs", "--group", str(g_a))["jobs"]]
check(a_id in in_g, "jobs --group filters")

for args in (("job", str(b_id)), ("cancel", str(b_id))):
    rc, _, err = run(ta, *args)
    check(rc == 1 and "no such job" in err, f"team-a: `loom {args[0]}` of team-b's job is not found")
check(js(tb, "job", str(b_id))["state"] == "queued", "... and team-b's job did not change")

rc, out, _ = run(ta, "job", str(a_id))
check(rc == 0 and "math-7b" in out and "SLO" in out and "cost" in out and "placement" in out
      and "submit" in out, f"loom job: spec, placement, SLO, cost, events\n{out}")
j = js(ta, "job", str(a_id))
check(j["slo"]["slo"] == 1.5 and j["slo"]["budget_s"] > 0
      and abs(j["cost"]["per_hour"] - 57.04) < 1e-9  # 8 H20 + 8 H800 at list price, as quotas
      and [e["kind"] for e in j["events"]] == ["submit"] and "spec" in j,
      "loom job -o json adds slo, cost and the job's events")

wb = b["worker_token"]
rc, out, err = run(wb, "job", str(b_id))
check(rc == 0 and "code-1b" in out, f"a job's worker token shows its job ({err.strip()})")
rc, _, err = run(wb, "jobs")
check(rc == 4, f"... and may not list jobs: exit 4 ({err.strip()})")
rc, _, err = run(wb, "job", str(a_id))
check(rc == 1 and "no such job" in err, "... nor read another job")

rc, _, err = run(ta, "groups")
check(rc == 4 and "admin" in err, f"a tenant may not list groups: exit 4 ({err.strip()})")
groups = js(admin, "groups")["groups"]
members = sorted(m for g in groups for m in g["members"])
check(members == sorted(ids_all), "admin lists the groups and their members")
rc, out, _ = run(admin, "groups")
check(rc == 0 and "MEMBERS" in out, "groups as a table")
nodes_a = js(ta, "nodes")
check(nodes_a["source"] == "jobs" and all(n["jobs"] == [a_id] for n in nodes_a["nodes"])
      and nodes_a["nodes"], "a tenant's nodes are its own jobs' only")
nodes = js(admin, "nodes")
check(nodes["source"] == "groups" and {n["pool"] for n in nodes["nodes"]} == {"rollout", "train"},
      "admin's nodes come from the groups")
cl_a = js(ta, "cluster")
check(cl_a["scope"] == "tenant" and cl_a["jobs"] == 1, "a tenant's cluster counts its own jobs")
rc, out, _ = run(admin, "cluster")
check(rc == 0 and "the whole cluster" in out and "3 live" in out, f"cluster summary\n{out}")
check(re.search(r"^store\s+sqlite$", out, re.M), f"the cluster summary names the store\n{out}")

rc, out, _ = run(ta, "events", "-o", "json")
ev_a = [json.loads(x) for x in out.splitlines()]
check(rc == 0 and [e["job"] for e in ev_a] == [a_id],
      "team-a's events are its own (-o json: one event per line)")
rc, out, _ = run(admin, "events")
check(rc == 0 and out.count("submit") == 3, f"admin sees every submit\n{out}")

# -- events --watch follows; cancel ---------------------------------------------------------------
e = dict(base_env, LOOM_TOKEN=ta)
w = subprocess.Popen([loom, "events", "--watch", "--interval", "0.2", "-o", "json"], env=e,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
first = json.loads(w.stdout.readline())
check(first["kind"] == "submit" and first["job"] == a_id, "--watch starts with the recent events")
tok_file = os.path.join(tmp, "token")
with open(tok_file, "w") as f:
    f.write(ta + "\n")
rc, out, err = run(None, "cancel", str(a_id), "--token-file", tok_file)
check(rc == 0 and f"cancelled job {a_id}" in out, f"cancel with --token-file ({err.strip()})")
t0 = time.time()
nxt = json.loads(w.stdout.readline())
check(nxt["kind"] == "exit" and nxt["job"] == a_id and nxt["reason"] == "cancelled"
      and time.time() - t0 < 10, "--watch prints the cancel as it happens")
w.send_signal(signal.SIGINT)
check(w.wait(timeout=10) == 0, "--watch ends with 0 on Ctrl-C")
rc, _, _ = run(ta, "cancel", str(a_id))
check(rc == 0, "cancelling a cancelled job answers the same")
check(js(ta, "job", str(a_id))["state"] == "cancelled", "the job is cancelled")

# -- credentials, TLS, reachability, usage -------------------------------------------------------
rc, _, err = run(None, "jobs")
check(rc == 4 and "loomd token create" in err, f"no token: exit 4, says how to get one ({err.strip()})")
rc, _, err = run("loom_t_" + "ab" * 32, "jobs")
check(rc == 4, f"an unknown token: exit 4 ({err.strip()})")
rc, out, _ = run(None, "jobs", "--token", tb, "-o", "json")
check(rc == 0 and len(json.loads(out)["jobs"]) == 2, "--token overrides the environment")
rc, _, err = run(ta, "jobs", env={"LOOM_CA_FILE": other_ca})
check(rc == 3 and "--ca-file" in err, f"the wrong CA: exit 3, names --ca-file ({err.strip()})")
rc, out, _ = run(ta, "jobs", "--ca-file", ca, "-o", "json", env={"LOOM_CA_FILE": other_ca})
check(rc == 0, "--ca-file overrides LOOM_CA_FILE")
rc, _, err = run(ta, "jobs", "--server", f"http://127.0.0.1:{d.port}")
check(rc == 3, f"plain HTTP to the HTTPS port: exit 3 ({err.strip()})")
rc, _, err = run(ta, "jobs", "--server", "127.0.0.1:1")
check(rc == 3 and "LOOM_URL" in err, f"nothing listening: exit 3, says where to point ({err.strip()})")
for args in (("jobs", "--bogus", "1"), ("job",), ("job", "abc"), ("cancel",), ("jobs", "extra"),
             ("submit",), ("jobs", "--state")):
    rc, _, err = run(ta, *args)
    check(rc == 2, f"bad usage `loom {' '.join(args)}`: exit 2 ({err.strip()})")
rc, _, err = run(ta, "jobs", "--state", "sleeping")
check(rc == 1 and "state" in err, f"an invalid --state is loomd's 422: exit 1 ({err.strip()})")
rc, _, err = run(ta, "jobs", "-o", "yaml")
check(rc == 1 and "-o" in err, "an invalid -o value: exit 1")

d.stop()
rc, _, err = run(ta, "jobs")
check(rc == 3, f"loomd stopped: exit 3 ({err.strip()})")
subprocess.run(["rm", "-rf", tmp])
print("loom ctl: all checks passed")
