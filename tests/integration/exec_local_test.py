"""loomd --executor local (docs/slurm.md): workers as local processes."""

import atexit
import os
import re
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check  # noqa: E402

BUILD, SRC = sys.argv[1], sys.argv[2]
out = tempfile.mkdtemp(prefix="loom-exec-local-")
if not os.environ.get("LOOM_KEEP_TEST_DATA"):
    atexit.register(shutil.rmtree, out, True)
worker = f"exec python3 {SRC}/tests/integration/exec_worker.py 0.05"
ld = Loomd(BUILD, "--executor", "local", "--worker", worker, "--exec-dir", out).start()


def job(i):
    return ld.req("GET", f"/v1/jobs/{i}")[1]


def wait(cond, what, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    check(False, what)


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def pids(prefix):
    r = {}
    for f in os.listdir(out):
        if f.startswith(prefix) and f.endswith(".out"):
            m = re.search(r" start pid (\d+) ", open(os.path.join(out, f)).read())
            if m:
                r[f] = int(m.group(1))
    return r


for name, it in (("a", 3), ("b", 3)):
    st, _ = ld.req("POST", "/v1/jobs", {"name": name, "rollout_gpus": 8, "train_gpus": 8,
                                       "t_roll_s": 2.0, "t_train_s": 1.0, "slo": 2.0,
                                       "iterations": it})
    check(st == 201, f"job {name} admitted")
wait(lambda: all(job(i)["state"] == "finished" for i in (1, 2)), "a and b finish")
check(all(job(i)["iterations_done"] == 3 for i in (1, 2)), "each did exactly 3 iterations")
p = pids("loom-j1-")
check(len(p) == 2, f"job 1 ran a rollout and a train worker ({sorted(p)})")
wait(lambda: not any(alive(x) for x in p.values()), "the workers exited with their job", 10)
text = open(os.path.join(out, "loom-j1-a1-rollout-0.out")).read()
check(" iteration 3 " in text, "the rollout worker ran iteration 3 under a permit")

st, _ = ld.req("POST", "/v1/jobs", {"name": "c", "rollout_gpus": 8, "train_gpus": 8,
                                   "t_roll_s": 2.0, "t_train_s": 1.0, "slo": 2.0,
                                   "iterations": 30})
wait(lambda: job(3)["iterations_done"] >= 2, "c is running")
victim = wait(lambda: pids("loom-j3-a3-train").get("loom-j3-a3-train-0.out"), "c's train pid")
os.kill(victim, signal.SIGKILL)
t0 = time.time()
wait(lambda: job(3)["restarts"] == 1, "the killed worker is seen and c retried", 10)
print(f"     retried {time.time() - t0:.1f} s after kill -9 of the worker")
wait(lambda: job(3)["state"] == "finished", "c finishes after its restart", 60)
j = job(3)
check(j["restarts"] == 1 and j["iterations_done"] == 30,
      f"one restart, exactly 30 iterations ({j['restarts']}, {j['iterations_done']})")
old = pids("loom-j3-a3-")
wait(lambda: not any(alive(x) for x in old.values()),
     "the failed admission's other worker was stopped", 10)
# a job on two rollout nodes: a worker per node, rank 0 follows the permits, rank 1 waits
st, _ = ld.req("POST", "/v1/jobs", {"name": "wide", "rollout_gpus": 16, "train_gpus": 8,
                                   "t_roll_s": 2.0, "t_train_s": 1.0, "slo": 2.0,
                                   "iterations": 2})
check(st == 201, "a job on two rollout nodes admitted")
wait(lambda: job(4)["state"] == "finished", "it finishes")
w = pids("loom-j4-")
names = sorted(re.sub(r"-a\d+-", "-", f) for f in w)
check(names == ["loom-j4-rollout-0.out", "loom-j4-rollout-1.out", "loom-j4-train-0.out"],
      f"one worker per node ({sorted(w)})")
r1 = open(os.path.join(out, next(f for f in w if f.endswith("rollout-1.out")))).read()
check(" rank 1 " in r1 and " iteration " not in r1,
      "rank 1 saw its rank and left the permits to rank 0")
wait(lambda: not any(alive(x) for x in w.values()), "all three exited with the job", 10)
check(ld.stop() == 0, "loomd stops cleanly")

# With authentication: the executor hands each worker its job's worker token (LOOM_TOKEN) and
# sync key; the worker's permits need the token, so the job finishes only if it arrived.
import subprocess  # noqa: E402
out2 = os.path.join(out, "auth")
os.mkdir(out2)
ld = Loomd(BUILD, "--require-auth", "--executor", "local", "--worker", worker, "--exec-dir", out2)
p = subprocess.run([os.path.join(BUILD, "loomd"), "token", "create", "--data-dir", ld.dir,
                    "--tenant", "team-a", "--role", "tenant"], capture_output=True, text=True)
check(p.returncode == 0, "a tenant token is created")
auth = {"Authorization": "Bearer " + p.stdout.strip()}
ld.start()
st, sub = ld.req("POST", "/v1/jobs", {"name": "t", "rollout_gpus": 8, "train_gpus": 8,
                                     "t_roll_s": 2.0, "t_train_s": 1.0, "slo": 2.0,
                                     "iterations": 2}, headers=auth)
check(st == 201 and sub.get("worker_token"), "the tenant's job admitted with a worker token")
jid = sub["id"]
wait(lambda: ld.req("GET", f"/v1/jobs/{jid}", headers=auth)[1]["state"] == "finished",
     "its workers, authenticated by the token the executor passed, finish it")
check(ld.req("GET", f"/v1/jobs/{jid}")[0] == 401, "an unauthenticated read is refused")
text = "".join(open(os.path.join(out2, f)).read() for f in os.listdir(out2)
               if f.startswith(f"loom-j{jid}-") and f.endswith("rollout-0.out"))
check(" iteration 2 " in text, "the rollout worker ran under permits it authenticated for")
check(ld.stop() == 0, "loomd with authentication stops cleanly")

# With a node map: GET /v1/groups names each group's nodes as the executor does (the names the
# dashboard shows, /v1/timeline's node_names), one name per id, in the same order.
import json  # noqa: E402
out3 = os.path.join(out, "names")
os.mkdir(out3)
node_map = os.path.join(out3, "nodes.json")
with open(node_map, "w") as f:
    json.dump({"rollout": {"partition": "rollout", "nodes": ["n17000r1", "n17000r2"]},
               "train": {"partition": "train", "nodes": ["n17000t1", "n17000t2"]}}, f)
ld = Loomd(BUILD, "--executor", "local", "--exec-nodes", node_map, "--worker", worker,
           "--exec-dir", out3).start()
for name in ("m", "n"):  # two members: the group holds a rollout node too
    st, _ = ld.req("POST", "/v1/jobs", {"name": name, "rollout_gpus": 8, "train_gpus": 8,
                                       "t_roll_s": 0.4, "t_train_s": 0.2, "slo": 2.0,
                                       "iterations": 1000})
    check(st == 201, f"job {name} admitted on a loomd with a node map")


def named_group():
    g = ld.req("GET", "/v1/groups")[1]["groups"]
    g = [x for x in g if x["members"]]
    if g and all(g[0][k] for k in ("rollout_node_names", "train_node_names")) and \
            None not in g[0]["rollout_node_names"] + g[0]["train_node_names"]:
        return g[0]
    return None


g = wait(named_group, "the group's nodes are bound to names", 10)
check(len(g["rollout_node_names"]) == len(g["rollout_nodes"]) >= 1 and
      len(g["train_node_names"]) == len(g["train_nodes"]) >= 1,
      f"one name per node id ({g['rollout_nodes']} {g['rollout_node_names']}, "
      f"{g['train_nodes']} {g['train_node_names']})")
check(set(g["rollout_node_names"]) <= {"n17000r1", "n17000r2"} and
      set(g["train_node_names"]) <= {"n17000t1", "n17000t2"},
      "the names are the node map's, each in its pool")
tl = ld.req("GET", "/v1/timeline")[1]["node_names"]
check(all(tl["rollout"].get(str(i), n) == n
          for i, n in zip(g["rollout_nodes"], g["rollout_node_names"])) and
      all(tl["train"].get(str(i), n) == n
          for i, n in zip(g["train_nodes"], g["train_node_names"])),
      f"the same names as /v1/timeline's node_names ({tl})")
# `loom groups` shows the names too (ids where a node has none)
table = subprocess.run([os.path.join(BUILD, "loom"), "groups", "--server",
                        "http://127.0.0.1:%d" % ld.port], capture_output=True, text=True)
check(table.returncode == 0 and any(n in table.stdout for n in g["train_node_names"]),
      f"loom groups names the nodes: {table.stdout!r} {table.stderr!r}")
check(ld.stop() == 0, "loomd with a node map stops cleanly")
