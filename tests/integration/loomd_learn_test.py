"""Learned-profile admission against a real loomd (docs/operations.md, "Admission"):

- bad --admission / --learn-after / policy.admission values are refused naming the option;
- A (SLO 3) declares a 0.4 s rollout and a 1.2 s training but its worker takes 0.1 s and
  0.08 s. B (0.2 s + 0.2 s, SLO 1.5) cannot join A's group on A's worst case (A alone runs
  1.6 s > B's 0.6 s budget): it gets a group of its own, and is cancelled. After three
  iterations A's budget is its measured solo iteration, but its plan stays on its worst case:
  the core plans on an upper confidence bound of the p95 (90%), which 45 iterations are needed
  to give. After the 45th A's group is re-planned on that bound (the learned profile in A's
  JSON and /metrics), and the same B now direct-packs into A's group at +$0/h;
- loomd is killed with SIGKILL and started again on the same data dir: every job's placement,
  learned profile and replans, the groups, the cluster view and the counters are the same;
  both jobs then run in the shared group and A keeps learning;
- the store is refused (exit 1) if an observation in its log is altered, or if loomd is started
  on it with admission worst;
- X, packed beside Y on their declared profiles, really runs five times faster: measured on
  that, no group holding Y meets its budget, so loomd re-admits X on its learned profile (cause
  "learned"), Y keeps running, and kill -9 replays it.
- under the defaults (normal bound, move_lone), A alone on its training node learns its p99 in
  three iterations and is moved into B's group (cause "moved"); kill -9 replays it.
- under move_members, C, sharing A's group, learns that it trains 5x faster than declared and
  is moved into B's group, A going back to rolling out on its training node; kill -9 replays it.
The phase lengths are the worker's sleeps: wall time, as loomd measures every lease.
"""

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, job_spec  # noqa: E402

build, source = sys.argv[1], sys.argv[2]
loomd = os.path.join(build, "loomd")
# Sections 2-5 exercise the distribution-free order bound and keep lone members where they
# are; section 6 runs the defaults (the normal bound, moves).
ORDER = os.path.join(tempfile.mkdtemp(prefix="loomd-learn-pol-"), "cluster.json")
with open(ORDER, "w") as f:
    f.write('{"cluster": {}, "policy": {"learn_bound": "order", "move_lone": false}}\n')
ARGS = ["--admission", "p95", "--learn-after", "3", "--lease-timeout", "60", "--quiet",
        "--cluster", ORDER]


def usage_error(*args):
    p = subprocess.run([loomd, "--data-dir", "/nonexistent-loomd-learn"] + list(args),
                       capture_output=True, text=True)
    return p.returncode, p.stderr


# ---- 1. configuration ---------------------------------------------------------------------
rc, err = usage_error("--admission", "p50")
check(rc == 2 and "--admission" in err,
      f"--admission p50 is bad usage naming the option ({err.strip()})")
rc, err = usage_error("--learn-after", "0")
check(rc == 2 and "--learn-after" in err, f"--learn-after 0 is refused ({err.strip()})")
rc, err = usage_error("--learn-after", "21")
check(rc == 2 and "--learn-after" in err, "--learn-after above the learning window is refused")
tmp = tempfile.mkdtemp(prefix="loomd-learn-")
try:
    bad = os.path.join(tmp, "policy.json")
    with open(bad, "w") as f:
        f.write('{"cluster": {},\n "policy": {"admission": "p50"}}\n')
    p = subprocess.run([loomd, "--data-dir", tmp, "--cluster", bad], capture_output=True,
                       text=True)
    check(p.returncode == 1 and "policy.admission" in p.stderr and ":2:" in p.stderr,
          f"a bad policy.admission names the field and line ({p.stderr.strip()})")
finally:
    shutil.rmtree(tmp, True)

d = Loomd(build, *ARGS).start()
_, cl = d.req("GET", "/v1/cluster")
check(cl["policy"]["admission"] == "p95" and cl["policy"]["learn_after"] == 3,
      f"/v1/cluster reports the admission mode ({cl['policy']})")


def phase(jid, ph, secs):
    st, lease = d.req("POST", f"/v1/jobs/{jid}/phases/{ph}/acquire?wait=20")
    if st != 200:
        check(False, f"job {jid} acquires {ph} ({st} {lease})")
    time.sleep(secs)
    st, body = d.req("POST", f"/v1/leases/{lease['lease']}/release", {"status": "ok"})
    if st != 200:
        check(False, f"job {jid} releases {ph} ({st} {body})")
    return body


def job(jid):
    return d.req("GET", f"/v1/jobs/{jid}")[1]


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


# ---- 2. learning opens the slack a worst-case plan keeps -------------------------------------
st, a = d.req("POST", "/v1/jobs", job_spec("A", 0.4, 1.2, 3.0, 0))
check(st == 201 and a["decision"]["decision"] == "new_group", "A gets a group")
B = job_spec("B", 0.2, 0.2, 1.5, 0)
st, b1 = d.req("POST", "/v1/jobs", B)
check(st == 201 and b1["decision"]["decision"] == "new_group"
      and b1["decision"]["group"] != a["decision"]["group"]
      and b1["decision"]["marginal_cost_per_hour"] > 0,
      f"on A's worst case B cannot join A's group: {b1['decision']['decision']}, "
      f"+${b1['decision']['marginal_cost_per_hour']:.2f}/h")
st, _ = d.req("DELETE", f"/v1/jobs/{b1['id']}")
check(st == 200, "B is cancelled, its group released")
check(a["learned"] is False and a["replans"] == 0 and a["learned_profile"] is None,
      "A starts on its declared profile")
for it in range(1, 4):
    phase(a["id"], "rollout", 0.1)
    body = phase(a["id"], "train", 0.08)
    if it < 3:
        check(body["replans"] == 0 and not body["learned"], f"no re-plan after iteration {it}")
ja = job(a["id"])
lp = ja["learned_profile"]
check(ja["learned"] and ja["replans"] == 1,
      f"after 3 iterations A's budget is re-planned ({ja['replans']})")
check(lp["t_roll_s"] == 0.4 and lp["t_train_s"] == 1.2 and 0.54 <= lp["budget_s"] < 2.4,
      f"3 samples bound no p95: A stays on its worst case ({lp['t_roll_s']:.3f} s, "
      f"{lp['t_train_s']:.3f} s), held to 3 x its mean solo iteration ({lp['budget_s']:.3f} s)")
for it in range(4, 46):
    phase(a["id"], "rollout", 0.1)
    phase(a["id"], "train", 0.08)
    if it == 44:
        lp = job(a["id"])["learned_profile"]
        check(lp["t_roll_s"] == 0.4 and lp["t_train_s"] == 1.2,
              "44 samples bound no p95 at 90% (1 - 0.95^44 < 0.9): still the worst case")
ja = job(a["id"])
lp = ja["learned_profile"]
check(ja["learned"] and ja["replans"] >= 2,
      f"after 45 iterations A's group is re-planned on the bound ({ja['replans']})")
check(0.1 <= lp["t_roll_s"] < 0.4 and 0.08 <= lp["t_train_s"] < 0.6,
      f"on the bound of A's p95: rollout {lp['t_roll_s']:.3f} s, train {lp['t_train_s']:.3f} s")
check(0.54 <= lp["budget_s"] < 2.4,
      f"A is held to 3 x its mean solo iteration ({lp['budget_s']:.3f} s)")
check(ja["spec"]["t_roll_s"] == 0.4 and ja["profile"]["t_train_s"] == 1.2,
      "the declared spec and the admission profile are kept")
_, m = d.req("GET", "/metrics")
check(metric(m, "loom_replans_total") == ja["replans"], "/metrics counts the re-plans")
st, b2 = d.req("POST", "/v1/jobs", B)
dec = b2["decision"]
# A alone runs colocated on its training node (policy.colocate_lone): joining it provisions
# A's planned rollout node, $14.80/h, and nothing else.
check(st == 201 and dec["decision"] == "direct_pack" and dec["group"] == a["decision"]["group"]
      and abs(dec["marginal_cost_per_hour"] - 14.80) < 1e-9,
      f"the same B now packs into A's group: {dec['decision']}, "
      f"+${dec['marginal_cost_per_hour']:.2f}/h, T_meta {dec['t_meta_s']:.3f} s")


# ---- 3. kill -9 and replay --------------------------------------------------------------------
KEYS = ["id", "state", "group", "rollout_nodes", "train_nodes", "iterations_done", "learned",
        "learned_profile", "replans", "profile", "restarts", "resubmits", "next_phase"]


def snapshot():
    _, jobs = d.req("GET", "/v1/jobs")
    _, groups = d.req("GET", "/v1/groups")
    _, cluster = d.req("GET", "/v1/cluster")
    cluster.pop("cost_by_tenant")  # what the clock moves
    _, m = d.req("GET", "/metrics")
    counters = [ln for ln in m.splitlines()
                if ln.startswith(("loom_replans_total", "loom_decisions_total", "loom_nodes",
                                  "loom_groups"))]
    return ([{k: j[k] for k in KEYS} for j in jobs["jobs"]], groups, cluster, counters)


before = snapshot()
d.kill9()
d.start()
after = snapshot()
for i, what in enumerate(["jobs (placements, learned profiles, replans)", "groups",
                          "cluster view", "counters"]):
    if before[i] != after[i]:
        print("before:", before[i], "\nafter: ", after[i], file=sys.stderr)
    check(before[i] == after[i], f"after kill -9 the replayed {what}: the same")

# Both jobs run in the shared group; A keeps learning.
errors = []


def run(jid, roll, train, iters):
    try:
        for _ in range(iters):
            phase(jid, "rollout", roll)
            phase(jid, "train", train)
    except BaseException as e:  # noqa: BLE001
        errors.append(e)


ts = [threading.Thread(target=run, args=(a["id"], 0.1, 0.08, 2)),
      threading.Thread(target=run, args=(b2["id"], 0.06, 0.06, 2))]
for t in ts:
    t.start()
for t in ts:
    t.join(timeout=60)
check(not errors and not any(t.is_alive() for t in ts), "A and B run two iterations side by side")
ja, jb = job(a["id"]), job(b2["id"])
check(ja["iterations_done"] == 47 and jb["iterations_done"] == 2
      and ja["group"] == jb["group"] == a["decision"]["group"],
      "in the shared group")
check(ja["replans"] >= 1 and ja["learned"] and ja["resubmits"] == 0,
      f"A stays on a learned plan ({ja['replans']} re-plans, no re-admission)")
final = snapshot()
check(d.stop() == 0, "loomd stops cleanly")

# ---- 4. the store is the truth --------------------------------------------------------------
d.start()
check(snapshot() == final, "a clean restart replays the same state")
check(d.stop() == 0, "loomd stops cleanly")

copy = tempfile.mkdtemp(prefix="loomd-learn-copy-")
try:
    shutil.copy(os.path.join(d.dir, "loom.db"), copy)
    db = sqlite3.connect(os.path.join(copy, "loom.db"))
    seq, reason = db.execute("SELECT seq, reason FROM log WHERE kind='observe' AND job=? "
                             "AND reason LIKE '%\"phase\":\"train\"%' ORDER BY seq LIMIT 1",
                             (a["id"],)).fetchone()
    db.execute("UPDATE log SET reason=? WHERE seq=?",
               (reason.replace('"took_us":', '"took_us":9'), seq))
    db.commit()
    db.close()
    pf = os.path.join(copy, "port")
    p = subprocess.Popen([loomd, "--data-dir", copy, "--listen", "127.0.0.1:0", "--port-file",
                          pf] + ARGS, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    for _ in range(3000):
        if (os.path.exists(pf) and open(pf).read().strip()) or p.poll() is not None:
            break
        time.sleep(0.01)
    started = p.poll() is None
    p.terminate()
    _, err = p.communicate(timeout=30)
    db = sqlite3.connect(os.path.join(copy, "loom.db"))
    div = (db.execute("SELECT value FROM meta WHERE key='replay_divergences'").fetchone()
           or [""])[0]
    db.close()
    check(started and "learned profiles came out otherwise" in div and
          ", 0 learned profiles" not in div,
          f"an altered observation is reported, not fatal: loomd starts on this core's profile "
          f"({div!r} {err.strip()[-200:]})")
    p = subprocess.run([loomd, "--data-dir", d.dir, "--listen", "127.0.0.1:0", "--quiet"],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode == 1 and "another policy" in p.stderr,
          f"the store keeps its admission mode ({p.stderr.strip()})")
finally:
    shutil.rmtree(copy, True)

# ---- 4b. a store written under worst may move to a learned mode, and not back ----
w = Loomd(build, "--lease-timeout", "60", "--quiet").start()
placed = {}
for n in ("W1", "W2"):
    st, j = w.req("POST", "/v1/jobs", job_spec(n, 1.0, 1.0, 1.5, 0))
    check(st == 201, f"worst store: {n} submitted ({st})")
    placed[j["id"]] = j["decision"]
w.stop()
w.args = ["--admission", "p99", "--learn-after", "3", "--lease-timeout", "60", "--quiet"]
w.start()
st, cl = w.req("GET", "/v1/cluster")
check(cl["policy"]["admission"] == "p99", "a worst store restarts under p99")
for i, dec in placed.items():
    st, j = w.req("GET", f"/v1/jobs/{i}")
    check(j["decision"] == dec, f"job {i} replays to the same placement under p99")
w.stop()
p = subprocess.run([loomd, "--data-dir", w.dir, "--listen", "127.0.0.1:0", "--quiet"],
                   capture_output=True, text=True, timeout=30)
check(p.returncode == 1 and "another policy" in p.stderr,
      f"once learned, it does not go back to worst ({p.stderr.strip()})")

# ---- 5. a job whose group cannot meet its real budget is re-admitted on its learned profile ----
# X and Y (0.5 s + 0.5 s, SLO 2) share a group. X really takes 0.1 s + 0.1 s: measured on that,
# its budget is 0.4 s, which no group holding Y (a 1 s solo iteration) meets, so after its
# third iteration loomd re-admits X on its learned profile, held to that budget, in a group
# of its own. Y really takes 0.4 s + 0.4 s (no drift) and keeps running where it was.
d = Loomd(build, *ARGS).start()
_, x = d.req("POST", "/v1/jobs", job_spec("X", 0.5, 0.5, 2.0, 0))
_, y = d.req("POST", "/v1/jobs", job_spec("Y", 0.5, 0.5, 2.0, 0))
check(y["decision"]["decision"] == "direct_pack" and y["group"] == x["group"],
      "X and Y share a group on their declared profiles")
stop = threading.Event()
errors = []


def keep_running(jid, roll, train):
    """A worker thread: job jid's phases back to back until stop is set."""
    def loop():
        try:
            while not stop.is_set():
                phase(jid, "rollout", roll)
                phase(jid, "train", train)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
    t = threading.Thread(target=loop)
    t.start()
    return t


ty = keep_running(y["id"], 0.4, 0.4)
for it in range(3):
    phase(x["id"], "rollout", 0.1)
    phase(x["id"], "train", 0.1)
jx = job(x["id"])
check(jx["readmission"] and jx["readmission"]["cause"] == "learned" and jx["resubmits"] == 1,
      f"X is re-admitted: {jx['readmission'] and jx['readmission']['reason']}")
# three samples bound no p95: X keeps its declared worst case, held to its measured budget
check(jx["profile"]["t_roll_s"] == 0.5 and jx["profile"]["t_train_s"] == 0.5
      and jx["learned_profile"]["budget_s"] < 0.6,
      f"on its learned profile ({jx['profile']}, budget {jx['learned_profile']['budget_s']:.3f} s)")
check(jx["group"] != y["group"] and jx["restarts"] == 0, "in a group of its own, no restart used")
for it in range(2):
    phase(x["id"], "rollout", 0.1)
    phase(x["id"], "train", 0.1)
_, m = d.req("GET", "/metrics")
check('loom_readmissions_total{cause="learned"} 1' in m, "/metrics counts the re-admission")
stop.set()
ty.join(timeout=30)
check(not errors, f"Y kept running ({errors})")
check(job(y["id"])["group"] == y["group"] and job(x["id"])["iterations_done"] == 5,
      "Y stays in its group, X carries on")
before = snapshot()
d.kill9()
d.start()
check(snapshot() == before,
      "after kill -9 the re-admission and what X learned since replay the same")
check(d.stop() == 0, "loomd stops cleanly")

# ---- 6. the defaults: the normal bound, and a lone member moved ----
# B's working sets (1,500 GB each) do not fit one node together, so its group has a rollout
# node. A (0.4 s + 1.2 s declared, SLO 3) cannot join it on its worst case (1.6 s against B's
# 0.6 s budget) and runs alone on its training node. It really takes 0.1 s + 0.08 s: three
# iterations bound its p99 (normal bound), and on that profile B's group takes it on B's
# rollout node, for less than half of A's training node: loomd moves it (cause "moved").
m = Loomd(build, "--admission", "p99", "--learn-after", "3", "--lease-timeout", "60",
          "--quiet").start()
d = m
_, cl = m.req("GET", "/v1/cluster")
check(cl["policy"]["learn_bound"] == "normal" and cl["policy"]["move_lone"] is True
      and cl["policy"]["move_members"] is True,
      f"the defaults: normal bound, moves on ({cl['policy']})")
_, b = m.req("POST", "/v1/jobs", job_spec("B", 0.2, 0.2, 1.5, 0, mem_rollout_gb=1500,
                                              mem_train_gb=1500))
_, a = m.req("POST", "/v1/jobs", job_spec("A", 0.4, 1.2, 3.0, 0))
check(a["group"] != b["group"], "on its worst case A gets a group of its own")
for it in range(3):
    phase(a["id"], "rollout", 0.1)
    phase(a["id"], "train", 0.08)
ja = job(a["id"])
check(ja["readmission"] and ja["readmission"]["cause"] == "moved"
      and ja["group"] == b["group"],
      f"A is moved into B's group ({ja['readmission']}, group {ja['group']} vs {b['group']})")
_, met = m.req("GET", "/metrics")
check('loom_readmissions_total{cause="moved"} 1' in met, "/metrics counts the move")
before = snapshot()
m.kill9()
m.start()
check(snapshot() == before, "after kill -9 the move replays the same")
check(m.stop() == 0, "loomd stops cleanly")

# ---- 7. a member of a shared group moves (policy.move_members) --------------------------------
# B (0.1 s + 0.03 s, SLO 2) has a rollout node of its own; A (0.1 s + 0.3 s, SLO 2) cannot
# join it and runs alone; C, declared like A with SLO 3, joins A's group, which provisions its
# rollout node. C really trains in 0.06 s: learned, it fits on B's rollout node for nothing, and
# without it A goes lone again, so A's group stops paying a rollout node: C is moved to B.
m = Loomd(build, "--admission", "p99", "--learn-after", "3", "--lease-timeout", "60",
          "--quiet").start()
d = m
_, b = m.req("POST", "/v1/jobs", job_spec("B", 0.1, 0.03, 2.0, 0, mem_rollout_gb=1500,
                                              mem_train_gb=1500))
_, a = m.req("POST", "/v1/jobs", job_spec("A", 0.1, 0.3, 2.0, 0))
_, c = m.req("POST", "/v1/jobs", job_spec("C", 0.1, 0.3, 3.0, 0))
check(a["group"] != b["group"] and c["group"] == a["group"],
      f"A alone, C beside it ({a['group']}, {b['group']}, {c['group']})")
stop = threading.Event()
errors = []
ta = keep_running(a["id"], 0.1, 0.3)
for it in range(3):
    phase(c["id"], "rollout", 0.1)
    phase(c["id"], "train", 0.06)
jc = job(c["id"])
stop.set()
ta.join(timeout=30)
check(not errors, f"A ran throughout ({errors})")
check(jc["readmission"] and jc["readmission"]["cause"] == "moved" and jc["group"] == b["group"]
      and "one of 2 members" in jc["readmission"]["reason"],
      f"C is moved into B's group ({jc['readmission']}, group {jc['group']} vs {b['group']})")
before = snapshot()
m.kill9()
m.start()
check(snapshot() == before, "after kill -9 the member's move replays the same")
check(m.stop() == 0, "loomd stops cleanly")

# ---- 8. a rollout's head is learned from its progress reports (policy.plan_tails) ------------
# H's rollouts last 0.5 s and report 52 of 64 responses done (past the 80% threshold) after
# 0.2 s: three iterations in, its learned profile has a head of about 0.2 s, below its rollout,
# and the store's observe entries carry the heads, so a kill -9 replays the same profile.
m = Loomd(build, "--admission", "p99", "--learn-after", "3", "--lease-timeout", "60",
          "--quiet").start()
d = m
_, h = m.req("POST", "/v1/jobs", job_spec("H", 1.0, 0.5, 2.0, 0))
for it in range(3):
    st, lease = d.req("POST", f"/v1/jobs/{h['id']}/phases/rollout/acquire?wait=20")
    check(st == 200, f"H acquires rollout {it} ({st} {lease})")
    time.sleep(0.2)
    st, _ = d.req("POST", f"/v1/leases/{lease['lease']}/progress", {"done": 52, "total": 64})
    time.sleep(0.3)
    d.req("POST", f"/v1/leases/{lease['lease']}/release", {"status": "ok"})
    phase(h["id"], "train", 0.1)
lp = job(h["id"])["learned_profile"] or {}
check("head_s" in lp and 0.15 < lp["head_s"] < lp["t_roll_s"], f"H's head is learned ({lp})")
before = snapshot()
m.kill9()
m.start()
check(snapshot() == before and (job(h["id"])["learned_profile"] or {}).get("head_s") ==
      lp.get("head_s"), "after kill -9 the learned head replays the same")
check(m.stop() == 0, "loomd stops cleanly")
shutil.rmtree(os.path.dirname(ORDER), True)
