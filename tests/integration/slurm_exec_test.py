"""loomd --executor slurm against a live local Slurm cluster (docs/slurm.md).

Every check reads Slurm's own view (squeue, scontrol, sinfo, the environment slurmd gave the
workers), never only loomd's. The cluster lives in a temporary directory with ports of its own
(node names carry the base port), so this runs beside other tests; it is torn down by pid
however the test ends."""

import atexit
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check  # noqa: E402

BUILD, SRC = sys.argv[1], sys.argv[2]
CLUSTER = os.path.join(SRC, "scripts", "slurm-cluster.sh")


def free_base():
    """A base port with the next 8 ports free (slurmctld + 4 slurmd + loomd + spare)."""
    rng = random.Random(os.getpid())
    for _ in range(200):
        base = rng.randrange(20000, 40000, 10)
        try:
            socks = []
            for p in range(base, base + 8):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            for s in socks:
                s.close()
            return base
        except OSError:
            for s in socks:
                s.close()
    raise RuntimeError("no free ports")


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(0)


for tool in ("slurmctld", "slurmd", "munged", "sbatch", "srun"):
    if not shutil.which(tool):
        skip(f"{tool} is not installed (scripts/deps.sh installs slurm-wlm and munge)")
if os.geteuid() != 0:
    skip("the local Slurm cluster runs its daemons as root")

BASE = free_base()
DIR = tempfile.mkdtemp(prefix="loom-slurm-test-")
CDIR = os.path.join(DIR, "cluster")
os.environ["SLURM_CONF"] = os.path.join(CDIR, "slurm.conf")
ROLL = [f"n{BASE}r1", f"n{BASE}r2"]
TRAIN = [f"n{BASE}t1", f"n{BASE}t2"]


def teardown():
    subprocess.run(["scancel", "-u", "root"], capture_output=True, timeout=10)
    subprocess.run(["bash", CLUSTER, "down", CDIR], capture_output=True, timeout=60)
    if not os.environ.get("LOOM_KEEP_TEST_DATA"):
        shutil.rmtree(DIR, True)


atexit.register(teardown)  # runs after the loomd reaper (registered later, atexit is LIFO)
up = subprocess.run(["bash", CLUSTER, "up", CDIR, str(BASE)], capture_output=True, text=True,
                    timeout=60)
if up.returncode != 0:
    skip("Slurm could not start here: " + up.stderr.strip())


def out(*cmd):
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=10).stdout


def steps():
    """{step name: (step id, node)} of loom's workers, as squeue lists them."""
    r = {}
    for line in out("squeue", "-h", "-a", "-s", "-o", "%i|%j|%N").splitlines():
        sid, name, node = line.split("|")
        if name.startswith("loom-j"):
            r.setdefault(name, []).append((sid, node))
    return r


def node_states():
    return dict(line.split("|") for line in out("sinfo", "-h", "-N", "-o", "%N|%T").splitlines())


def holder(node):
    """scontrol's record of node's loom allocation (running), or None."""
    for line in out("scontrol", "-o", "show", "job").splitlines():
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if f.get("JobName") == f"loom-node-{node}" and f.get("JobState") == "RUNNING":
            return f
    return None


def wait(cond, what, timeout=40, every=0.2, on_tick=None):
    end = time.time() + timeout
    while time.time() < end:
        if on_tick:
            on_tick()
        v = cond()
        if v:
            return v
        time.sleep(every)
    check(False, what)


nodes_file = os.path.join(DIR, "nodes.json")
with open(nodes_file, "w") as f:
    json.dump({"rollout": {"partition": "rollout", "nodes": ROLL},
               "train": {"partition": "train", "nodes": TRAIN}}, f)
worker = f"python3 {SRC}/tests/integration/exec_worker.py 0.2"
LPORT = BASE + 6
os.makedirs(os.path.join(DIR, "loomd"))
ld = Loomd(BUILD, "--executor", "slurm", "--exec-nodes", nodes_file, "--worker", worker,
           "--exec-dir", DIR,
           data_dir=os.path.join(DIR, "loomd")).start(LPORT)
print(f"cluster in {CDIR}, loomd on {LPORT}")


def submit(name, iterations, **extra):
    spec = {"name": name, "rollout_gpus": 8, "train_gpus": 8, "t_roll_s": 2.0,
            "t_train_s": 1.0, "slo": 2.0, "iterations": iterations}
    spec.update(extra)
    st, j = ld.req("POST", "/v1/jobs", spec)
    check(st == 201, f"job {name} admitted ({st})")
    return j


def job(i):
    return ld.req("GET", f"/v1/jobs/{i}")[1]


# ---- every node is down while loom holds none -------------------------------------------
wait(lambda: all(s.endswith("~") for s in node_states().values()),
     "nodes loom does not use are powered down (sinfo: idle~)")

# ---- two co-scheduled jobs, through Slurm, on the nodes placement chose --------------------
a, b = submit("a", 4), submit("b", 4)
check(a["group"] == b["group"], "a and b share a co-execution group")
seen = {}


def bound():
    """loom node id -> Slurm node, as the executor bound them (exec-nodes.txt)."""
    r = {}
    path = os.path.join(DIR, "exec-nodes.txt")
    for line in open(path).read().splitlines() if os.path.exists(path) else []:
        p, node, i = line.split()
        r[(int(p), int(i))] = node
    return r


bmap = wait(lambda: (lambda m: m if len(m) >= 2 else None)(bound()), "nodes bound", 10)
want = {1: (bmap[(0, a["rollout_nodes"][0])], bmap[(1, a["train_nodes"][0])]),
        2: (bmap[(0, b["rollout_nodes"][0])], bmap[(1, b["train_nodes"][0])])}


cost_match = []


def watch():
    for name, v in steps().items():
        seen.setdefault(name, set()).update(node for _, node in v)
    if len(seen) == 4 and not cost_match:
        c = ld.req("GET", "/v1/cluster")[1]["nodes"]
        held = [n for n in ROLL + TRAIN if holder(n)]
        up = [n for n, s in node_states().items() if not s.endswith(("~", "%", "#"))]
        cost_match.append((c["rollout"] + c["train"], len(held), len(up)))


wait(lambda: all(job(i)["state"] == "finished" for i in (1, 2)), "a and b finish", 60,
     on_tick=watch)
check(job(1)["restarts"] == 0 and job(2)["restarts"] == 0, "a and b ran without a restart")
for i in (1, 2):
    for pool, node in (("rollout", want[i][0]), ("train", want[i][1])):
        name = f"loom-j{i}-a{i}-{pool}-0"
        check(seen.get(name) == {node},
              f"squeue ran {name} on {node}, the node placement chose (saw {seen.get(name)})")
    check(job(i)["iterations_done"] == 4, f"job {i} did exactly its 4 iterations")
log = open(os.path.join(DIR, "loom-j1-a1-rollout-0.out")).read()
check(f"node {want[1][0]} " in log and "gpus 0,1,2,3,4,5,6,7" in log,
      "slurmd ran job 1's rollout worker on its node with 8 GPUs (SLURMD_NODENAME, "
      "CUDA_VISIBLE_DEVICES)")
check(all(len(v) == 1 for v in seen.values()), "never two steps for one worker")
check(cost_match and cost_match[0][0] == cost_match[0][1] == cost_match[0][2] == 2,
      f"the nodes loom pays for are the nodes Slurm has up and allocated to it "
      f"(loom, allocated, up: {cost_match})")

# ---- idle nodes are powered down, and up again for a new job -----------------------------
used = set(want[1])
wait(lambda: not steps(), "no loom step is left once the jobs finished", 10)
wait(lambda: all(node_states()[n].endswith("~") for n in used),
     "the nodes the finished group held are powered down (sinfo: idle~)", 30)
before_c = node_states()
c = submit("c", 2)
cn = wait(lambda: bound().get((0, c["rollout_nodes"][0])), "c's rollout node bound", 10)
check(before_c[cn].endswith("~"), f"c's rollout node {cn} was powered down before "
      f"({before_c[cn]})")
h = wait(lambda: holder(cn), f"{cn} powered up again and allocated to loom", 40)
check(h.get("Partition") == "rollout" and h.get("NodeList") == cn and "gpu:8" in
      h.get("TresPerNode", ""), f"scontrol: loom holds {cn} in partition rollout with gpu:8")
wait(lambda: job(3)["state"] == "finished", "c finishes on the powered-up node", 40)

# ---- a worker killed in Slurm is retried, counted once --------------------------------------
submit("d", 12)
sid = wait(lambda: next((v[0][0] for n, v in steps().items()
                        if n.startswith("loom-j4-") and n.endswith("-train-0")), None),
           "d's train step runs")
wait(lambda: job(4)["iterations_done"] >= 1, "d makes progress")
subprocess.run(["scancel", sid], check=True)
t0 = time.time()
j = wait(lambda: (lambda j: j if j["restarts"] == 1 else None)(job(4)),
         "the scancel'ed step is seen and the job retried", 15)
print(f"     retried {time.time() - t0:.1f} s after scancel {sid}")
wait(lambda: job(4)["state"] == "finished", "d finishes after its restart", 60)
j = job(4)
check(j["restarts"] == 1 and j["iterations_done"] == 12,
      f"one restart counted, exactly 12 iterations (restarts {j['restarts']}, "
      f"done {j['iterations_done']})")

# ---- kill -9 of loomd mid-run: the workers are adopted, none lost, none doubled -------------
submit("e", 16)
wait(lambda: job(5)["iterations_done"] >= 2, "e is running")

# ---- a job loom cancels is cancelled in Slurm --------------------------------------------------
submit("f", 100)
wait(lambda: sum(n.startswith("loom-j6-") for n in steps()) == 2, "f's two steps run")
st, _ = ld.req("DELETE", "/v1/jobs/6")
check(st == 200, "f cancelled in loomd")
t0 = time.time()
wait(lambda: not any(n.startswith("loom-j6-") for n in steps()),
     "f's steps are gone from squeue", 10)
print(f"     f's steps gone {time.time() - t0:.1f} s after the cancel")
before = {n: v for n, v in steps().items() if n.startswith("loom-j5-")}
ld.kill9()
time.sleep(1)
ld.start(LPORT)
dup = []


def no_dups():
    for n, v in steps().items():
        if len(v) > 1:
            dup.append(n)


wait(lambda: job(5)["state"] == "finished", "e finishes after loomd's restart", 60,
     on_tick=no_dups)
check(not dup, f"no worker was launched twice ({dup})")
j = job(5)
check(j["iterations_done"] == 16 and j["restarts"] == 0,
      f"e did exactly 16 iterations with no restart (done {j['iterations_done']}, "
      f"restarts {j['restarts']})")
outs = [f for f in os.listdir(DIR) if f.startswith("loom-j5-") and f.endswith(".out")]
starts = sum(open(os.path.join(DIR, f)).read().count(" start ") for f in outs)
check(starts == 2 and len(before) == 2,
      "the same two steps ran e before and after the restart (adopted, not relaunched)")
st = ld.stop()
check(st == 0, "loomd stops cleanly")
