"""loomd --executor slurm against a live local Slurm cluster (docs/slurm.md).

Every check reads Slurm's own view (squeue, scontrol, sinfo, the environment slurmd gave the
workers), never only loomd's. The cluster lives in a temporary directory with ports of its own
(node names carry the base port), so this runs beside other tests; it is torn down by pid
however the test ends."""

import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check  # noqa: E402
from slurm_harness import (cluster_up, free_base, node_states, out, steps,  # noqa: E402
                           wait, write_nodes)

BUILD, SRC = sys.argv[1], sys.argv[2]
CLUSTER = os.path.join(SRC, "scripts", "slurm-cluster.sh")
BASE = free_base(29500, 32000)  # below the ephemeral ports (32768-)
DIR, CDIR = cluster_up(CLUSTER, "loom-slurm-test-", BASE, cancel_first=True)
ROLL = [f"n{BASE}r1", f"n{BASE}r2"]
TRAIN = [f"n{BASE}t1", f"n{BASE}t2"]


def holder(node):
    """scontrol's record of node's loom allocation (running), or None."""
    for line in out("scontrol", "-o", "show", "job").splitlines():
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if f.get("JobName") == f"loom-node-{node}" and f.get("JobState") == "RUNNING":
            return f
    return None


nodes_file = write_nodes(DIR, ROLL, TRAIN)
# phases of 0.2 s, shorter than a reconcile round (0.5 s), also for g (the job that moves): a
# rollout permit issued before a round saw the change is held until the worker is on its node
worker = f"exec {BUILD}/loom-worker 0.2"  # the program make install installs
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


doubled = set()


def watch():
    for name, v in steps().items():
        seen.setdefault(name, set()).update(node for _, node in v)
        if len(v) > 1:
            doubled.add(name)
    if len(seen) == 4 and not cost_match:
        c = ld.req("GET", "/v1/cluster")[1]["nodes"]
        held = [n for n in ROLL + TRAIN if holder(n)]
        up = [n for n, s in node_states().items() if not s.endswith(("~", "%", "#"))]
        cost_match.append((c["rollout"] + c["train"], len(held), len(up)))


wait(lambda: all(job(i)["state"] == "finished" for i in (1, 2)), "a and b finish", 60,
     on_tick=watch)
check(job(1)["restarts"] == 0 and job(2)["restarts"] == 0, "a and b ran without a restart")
# a, alone for a moment, is a lone member: its first rollout may run on its training node (where
# its lease puts it) before b joins; from then on both roll out on the rollout nodes
for i in (1, 2):
    for pool, node in (("rollout", want[i][0]), ("train", want[i][1])):
        name = f"loom-j{i}-a{i}-{pool}-0"
        ok = seen.get(name) == {node} or (i == 1 and pool == "rollout" and
                                          seen.get(name) == {node, want[1][1]})
        check(ok, f"squeue ran {name} on {node}, the node placement chose (saw {seen.get(name)})")
    check(job(i)["iterations_done"] == 4, f"job {i} did exactly its 4 iterations")
log = open(os.path.join(DIR, "loom-j1-a1-rollout-0.out")).read()
check(f"node {want[1][0]} " in log and "gpus 0,1,2,3,4,5,6,7" in log,
      "slurmd ran job 1's rollout worker on its node with 8 GPUs (SLURMD_NODENAME, "
      "CUDA_VISIBLE_DEVICES)")
check(not doubled, f"never two steps for one worker ({doubled})")
check(cost_match and cost_match[0][0] == cost_match[0][1] == cost_match[0][2] == 2,
      f"the nodes loom pays for are the nodes Slurm has up and allocated to it "
      f"(loom, allocated, up: {cost_match})")

# ---- a lone member holds its training node only, and rolls out there ---------------------------
# c alone fits its SLO colocated (policy.colocate_lone): the core provisions no rollout node and
# its leases put every rollout on its training node. Slurm must hold exactly that node.
used = set(want[1])
wait(lambda: not steps(), "no loom step is left once the jobs finished", 10)
wait(lambda: all(node_states()[n].endswith("~") for n in used),
     "the nodes the finished group held are powered down (sinfo: idle~)", 30)
c = submit("c", 6)
ct = wait(lambda: bound().get((1, c["train_nodes"][0])), "c's training node bound", 10)
lone_seen, lone_held, lone_up = {}, set(), set()


def watch_lone():
    for name, v in steps().items():
        if name.startswith("loom-j3-"):
            lone_seen.setdefault(name, set()).update(node for _, node in v)
    lone_held.update(n for n in ROLL + TRAIN if holder(n))
    lone_up.update(n for n, s in node_states().items() if not s.endswith(("~", "%")))


wait(lambda: job(3)["iterations_done"] >= 2, "c runs", 40, on_tick=watch_lone)
cl = ld.req("GET", "/v1/cluster")[1]
print(f"     lone c: loom counts {cl['nodes']}, ${cl.get('cost_per_hour')}/h; Slurm holds "
      f"{sorted(lone_held)}, up {sorted(lone_up)}")
check(cl["nodes"]["rollout"] == 0 and cl["nodes"]["train"] == 1,
      f"loom counts 0 rollout nodes and 1 training node for lone c ({cl['nodes']})")
wait(lambda: job(3)["state"] == "finished", "c finishes", 40, on_tick=watch_lone)
check(lone_held == {ct}, f"squeue/scontrol: Slurm held exactly c's training node {ct} "
      f"(held {sorted(lone_held)})")
check(not (lone_up & set(ROLL)), f"sinfo: no rollout node came up for lone c "
      f"(up {sorted(lone_up)})")
check(lone_seen.get("loom-j3-a3-rollout-0") == {ct} and lone_seen.get("loom-j3-a3-train-0") == {ct},
      f"squeue ran c's rollout and train steps on its training node {ct} ({lone_seen})")
log = open(os.path.join(DIR, "loom-j3-a3-rollout-0.out")).read()
check(f"node {ct} " in log and log.count(" iteration ") == 6,
      "slurmd ran all 6 of c's rollouts on its training node (SLURMD_NODENAME)")
check(job(3)["restarts"] == 0, "c ran without a restart")

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
# e says what loading its rollout onto a node costs (cold_s), so that it may go lone again in
# its last iterations (without it, a member with fewer than 20 left keeps its rollout node)
submit("e", 16, cold_s=0.1)
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
# f joined e's group for a moment (e's rollouts moved to the rollout node and back): let e settle
# lone on its training node before the kill
et = bound().get((1, job(5)["train_nodes"][0]))
wait(lambda: (lambda v: len(v) == 2 and all(n == et for x in v.values() for _, n in x))(
    {n: v for n, v in steps().items() if n.startswith("loom-j5-")}),
    f"e's two steps run on its training node {et}", 30)
before = {n: v for n, v in steps().items() if n.startswith("loom-j5-")}
ld.kill9()
time.sleep(1)
ld.start(LPORT)
dup = []


after = set()


def no_dups():
    for n, v in steps().items():
        if len(v) > 1:
            dup.append(n)
        if n.startswith("loom-j5-"):
            after.update(sid for sid, _ in v)


wait(lambda: job(5)["state"] == "finished", "e finishes after loomd's restart", 60,
     on_tick=no_dups)
check(not dup, f"no worker was launched twice ({dup})")
j = job(5)
check(j["iterations_done"] == 16 and j["restarts"] == 0,
      f"e did exactly 16 iterations with no restart (done {j['iterations_done']}, "
      f"restarts {j['restarts']})")
check(len(before) == 2 and after <= {sid for v in before.values() for sid, _ in v},
      "the same two steps ran e before and after the restart (adopted, not relaunched)")
# ---- a second member joins a lone group, then leaves ---------------------------------------
# g runs lone (its training node only); h joins its group: the core provisions the group's
# rollout node, Slurm powers it up and holds it, and g's rollouts move there. When h finishes,
# g is lone again: the rollout node's holder is cancelled and the node powered down, and g's
# rollouts come back to its training node. g never restarts.
wait(lambda: all(s.endswith("~") for n, s in node_states().items() if n in ROLL),
     "rollout nodes powered down before g", 30)
g = submit("g", 400)
gt = wait(lambda: bound().get((1, g["train_nodes"][0])), "g's training node bound", 10)
wait(lambda: job(7)["iterations_done"] >= 2, "g runs lone", 40)
check(not any(holder(n) for n in ROLL), "squeue: no rollout node is held while g is lone")
gname = next(n for n in steps() if n.startswith("loom-j7-") and n.endswith("-rollout-0"))
check({n for _, n in steps().get(gname, [])} == {gt},
      f"squeue: g's rollout step runs on its training node {gt}")
h = submit("h", 12)
check(h["group"] == g["group"], "h joins g's group")
gr = wait(lambda: bound().get((0, g["rollout_nodes"][0])), "g's rollout node bound", 10)
hh = wait(lambda: holder(gr), f"the rollout node {gr} powered up and held for the group", 40)
check(hh.get("Partition") == "rollout" and hh.get("NodeList") == gr and "gpu:8" in
      hh.get("TresPerNode", ""), f"scontrol: loom holds {gr} in partition rollout with gpu:8")
wait(lambda: any(n == gr for _, n in steps().get(gname, [])),
     f"squeue: g's rollout step moved to the rollout node {gr}", 30)
g_before = job(7)["iterations_done"]
wait(lambda: job(7)["iterations_done"] >= g_before + 2, "g rolls out on the rollout node", 30)
cl = ld.req("GET", "/v1/cluster")[1]["nodes"]
check(cl["rollout"] == 1 and cl["train"] == 1 and {n for n in ROLL + TRAIN if holder(n)} ==
      {gr, gt}, f"two members: loom counts {cl}, Slurm holds {gr} and {gt}")
wait(lambda: job(8)["state"] == "finished", "h finishes", 60)
t0 = time.time()
wait(lambda: not holder(gr), f"g is lone again: the holder of {gr} is cancelled", 30)
print(f"     {gr}'s holder cancelled {time.time() - t0:.1f} s after h finished")
wait(lambda: node_states()[gr].endswith(("~", "%")), f"sinfo: {gr} powers down", 30)
wait(lambda: {n for _, n in steps().get(gname, [])} == {gt},
     f"squeue: g's rollout step is back on its training node {gt}", 30)
g_before = job(7)["iterations_done"]
wait(lambda: job(7)["iterations_done"] >= g_before + 2, "g rolls out lone again", 30)
check({n for n in ROLL + TRAIN if holder(n)} == {gt},
      f"squeue: Slurm holds only g's training node {gt} again")
glog = open(os.path.join(DIR, gname + ".out")).read()
check(f"node {gr} " in glog and glog.rstrip().splitlines()[-1].split(" node ")[1].startswith(gt),
      "slurmd ran g's rollouts on the rollout node while h was there, and on the training node "
      "after")
check(job(7)["restarts"] == 0, "g moved twice without a restart")
st, _ = ld.req("DELETE", "/v1/jobs/7")
check(st == 200, "g cancelled")
# every rollout of g ran on the pool its lease named: loomd's log of leases, in order, against
# the node slurmd gave the worker for each (the lease is printed before the worker's line)
leases = re.findall(r"lease \d+: job 7 \(g\) rollout on (\w+) node",
                    open(os.path.join(DIR, "loomd", "loomd.stderr")).read())
ran = ["rollout" if ln.split(" node ")[1].split()[0] in ROLL else "train"
       for ln in open(os.path.join(DIR, gname + ".out")).read().splitlines() if " iteration " in ln]
m = min(len(leases), len(ran))
bad = [i for i in range(m) if leases[i] != ran[i]]
turns = {i for i in range(1, m) if leases[i] != leases[i - 1]}
print(f"     g: {len(leases)} rollout leases, {leases.count('rollout')} on the rollout pool; "
      f"{len(ran)} rollouts seen by the worker; ran elsewhere than leased: {bad}, at the "
      f"changes {sorted(turns)}")
# A rollout permit is held until the worker is on the node it names, however short the phases:
# every rollout ran where its lease said, also the first ones after each change.
check(m >= 6 and len(leases) - m <= 1 and not bad and len(turns) == 2,
      f"g's rollouts ran on the pool their leases named, also right after each of the two "
      f"changes (mismatched: {bad[:5]}, leases {len(leases)}, worker {len(ran)})")
wait(lambda: not steps() and not any(holder(n) for n in ROLL + TRAIN),
     "no loom step or holder left", 30)

st = ld.stop()
check(st == 0, "loomd stops cleanly")
