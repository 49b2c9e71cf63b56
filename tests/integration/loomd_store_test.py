"""Store versioning and compaction (docs/operations.md). Usage: loomd_store_test.py BUILD SOURCE

1. Versioning. A p99 store holds observe entries with the outcomes the core computed. Change
   one stored outcome (what an older core arithmetic would have written): with the same
   recorded arithmetic loomd starts, reports the divergence (meta "replay_divergences", the log)
   and takes its own outcome; recorded under another arithmetic, loomd re-derives the log with
   its own core, starts, records meta "rederived", and the job's learned profile is the one this
   core computes (the stored one is ignored).
2. Compaction. With --compact-min 64, three jobs (two sharing a group) run 100 iterations,
   each rollout reporting its head: the log keeps far fewer than the 600 observe entries, the
   live state is unchanged by it, and a kill -9 restart replays the compacted log to the same
   placements, learned profiles (rollout heads included) and re-plan counts (replay still
   checks every entry it keeps).
3. Divergent placements. The store a crash left where a job tied between two groups
   (tests/fixtures/replay-tie, written under core arithmetic 8, whose lone groups depended on
   unlogged phase state) starts; and a store whose recorded placement this core would not make
   (a job's decision moved to another group that could have taken it) starts, reports the
   divergence and keeps the recorded placement: the job is served in the group its row names.
4. Owner-only. Started by hand under umask 022, loomd creates its data directory 0700 and
   loom.db (which holds the secret worker tokens are derived from), its -wal and auth.db 0600;
   a store an older loomd left 0644 is narrowed at the next start. A new data directory records
   this core's arithmetic and says nothing of re-deriving.
"""
import json
import lzma
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, job_spec  # noqa: E402

build, source = sys.argv[1], sys.argv[2]
# the core's arithmetic version this build records (include/loom/sched.h)
ARITH = re.search(r"#define LOOM_SCHED_ARITH (\d+)",
                  open(os.path.join(source, "include/loom/sched.h")).read()).group(1)
ARGS = ["--admission", "p99", "--learn-after", "3", "--lease-timeout", "60", "--quiet"]


def run_iters(d, jid, n, heads=False):
    for _ in range(n):
        for ph in ("rollout", "train"):
            st, lease = d.req("POST", f"/v1/jobs/{jid}/phases/{ph}/acquire?wait=20")
            check(st == 200, f"job {jid} acquires {ph} ({st})")
            if heads and ph == "rollout":  # past the tail threshold: the rollout's head
                st, _ = d.req("POST", f"/v1/leases/{lease['lease']}/progress",
                              {"done": 60, "total": 64})
                check(st == 200, f"job {jid} reports progress")
            st, _ = d.req("POST", f"/v1/leases/{lease['lease']}/release", {"status": "ok"})
            check(st == 200, f"job {jid} releases {ph}")


def start_status(dirname):
    """(exit code or None if it started, stderr) of loomd on a copy of dirname."""
    pf = os.path.join(dirname, "port")
    if os.path.exists(pf):
        os.unlink(pf)
    p = subprocess.Popen([os.path.join(build, "loomd"), "--data-dir", dirname, "--listen",
                          "127.0.0.1:0", "--port-file", pf] + ARGS,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for _ in range(1000):
        if os.path.exists(pf) or p.poll() is not None:
            break
        time.sleep(0.01)
    if p.poll() is None:
        port = int(open(pf).read())
        p.terminate()
        _, err = p.communicate(timeout=30)
        return None, err, port
    return p.returncode, p.stderr.read(), None


# ---- 1. versioning ----------------------------------------------------------------------
d = Loomd(build, *ARGS).start()
st, j = d.req("POST", "/v1/jobs", job_spec("v", t_roll=1.0, t_train=1.0, slo=2.0, iterations=0))
check(st == 201, f"job submitted ({st})")
jid = j["id"]
run_iters(d, jid, 5)
st, live = d.req("GET", f"/v1/jobs/{jid}")
check(live["learned_profile"] is not None, f"the job learned a profile ({live['learned_profile']})")
d.kill9()

db = os.path.join(d.dir, "loom.db")
c = sqlite3.connect(db)
check(c.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0] == "2",
      "the store says its format version (2)")
seq, reason = c.execute("SELECT seq, reason FROM log WHERE kind='observe' "
                        "ORDER BY seq DESC LIMIT 1").fetchone()
o = json.loads(reason)
o["t_train_us"] += 1234  # what another arithmetic would have computed
c.execute("UPDATE log SET reason=? WHERE seq=?", (json.dumps(o, sort_keys=True), seq))
c.commit()
c.close()

tmp = tempfile.mkdtemp(prefix="loomd-store-")
try:
    same = os.path.join(tmp, "same")
    shutil.copytree(d.dir, same)
    rc, err, _ = start_status(same)
    c = sqlite3.connect(os.path.join(same, "loom.db"))
    div = dict(c.execute("SELECT key, value FROM meta").fetchall()).get("replay_divergences", "")
    c.close()
    check(rc is None and "1 learned profiles came out otherwise" in div,
          f"a stored outcome this arithmetic does not reproduce is reported, not fatal ({rc}: "
          f"{div!r} {err.strip()[-160:]})")

    other = os.path.join(tmp, "other")
    shutil.copytree(d.dir, other)
    c = sqlite3.connect(os.path.join(other, "loom.db"))
    c.execute("INSERT OR REPLACE INTO meta(key,value) VALUES('arith','0')")
    c.commit()
    c.close()
    again = Loomd(build, *ARGS, data_dir=other).start()
    st, re = again.req("GET", f"/v1/jobs/{jid}")
    check(st == 200 and re["learned_profile"] == live["learned_profile"],
          f"re-derived: the learned profile is this core's ({re['learned_profile']} vs "
          f"{live['learned_profile']})")
    again.stop()
    c = sqlite3.connect(os.path.join(other, "loom.db"))
    meta = dict(c.execute("SELECT key, value FROM meta").fetchall())
    c.close()
    check(meta.get("arith") == ARITH and "re-derived" in meta.get("rederived", "")
          and "1 learned profiles came out differently" in meta["rederived"],
          f"the re-derivation is recorded ({meta.get('rederived')})")
    # a later start re-derives the same entries the same way
    again2 = Loomd(build, *ARGS, data_dir=other).start()
    st, re2 = again2.req("GET", f"/v1/jobs/{jid}")
    check(re2["learned_profile"] == live["learned_profile"], "a second start agrees")
    again2.kill9()
finally:
    shutil.rmtree(tmp, True)

# ---- 2. compaction -----------------------------------------------------------------------
# single-rate groups, so that one iteration of each job in turn is the round robin's order
single = os.path.join(tempfile.mkdtemp(prefix="loomd-store-"), "cluster.json")
with open(single, "w") as f:
    f.write('{"cluster": {}, "policy": {"multirate": false, "learn_bound": "order", '
            '"move_lone": false}}\n')
d = Loomd(build, *(ARGS + ["--compact-min", "64", "--cluster", single])).start()
ids = []
for name, slo in (("x", 1.0), ("y", 3.0), ("z", 3.0)):
    # bounded: each training appends its job's count (an "iter" entry) beside the observations
    st, j = d.req("POST", "/v1/jobs", job_spec(name, t_roll=1.0, t_train=0.5, slo=slo,
                                                 iterations=1000))
    check(st == 201, f"job {name} submitted ({st}: group {j.get('decision', {}).get('group')})")
    ids.append(j["id"])
for _ in range(100):
    for jid in ids:
        run_iters(d, jid, 1, heads=True)  # each rollout's head kept through compaction too


def state(dd):
    out = []
    for jid in ids:
        st, j = dd.req("GET", f"/v1/jobs/{jid}")
        out.append((j["decision"], j["learned_profile"], j["replans"], j["learned"]))
        check(not j["learned_profile"] or "head_s" in j["learned_profile"],
              f"job {jid}: its head is learned ({j['learned_profile']})")
    return out


before = state(d)
d.kill9()
c = sqlite3.connect(os.path.join(d.dir, "loom.db"))
obs = c.execute("SELECT count(*) FROM log WHERE kind='observe'").fetchone()[0]
iters = c.execute("SELECT count(*) FROM log WHERE kind='iter'").fetchone()[0]
c.close()
check(obs < 3 * 2 * 100 // 2,
      f"the log was compacted: {obs} observe entries kept of {3 * 2 * 100}")
check(iters < 3 * 100 // 2,
      f"and the iteration counts between them folded: {iters} iter entries kept of {3 * 100}")
d.start()
after = state(d)
for i, jid in enumerate(ids):
    check(before[i] == after[i], f"job {jid}: after kill -9 the compacted log replays the same "
          f"placement, learned profile and re-plans ({after[i][1:]})")
check(any(b[2] > 0 for b in before), f"re-plans happened ({[b[2] for b in before]})")
d.stop()
shutil.rmtree(os.path.dirname(single), True)

# ---- 3. divergent placements ------------------------------------------------------------
tmp = tempfile.mkdtemp(prefix="loomd-store-")
try:
    tie = os.path.join(tmp, "tie")
    os.makedirs(tie)
    with lzma.open(os.path.join(source, "tests/fixtures/replay-tie/loom.db.xz")) as f, \
            open(os.path.join(tie, "loom.db"), "wb") as out:
        out.write(f.read())
    t = Loomd(build, "--quiet", data_dir=tie).start()
    st, j = t.req("GET", "/v1/jobs/122")
    check(st == 200 and j["decision"]["group"] == 53,
          f"the tie store starts and job 122 keeps group 53 ({st}, {j.get('decision')})")
    t.stop()
    c = sqlite3.connect(os.path.join(tie, "loom.db"))
    meta = dict(c.execute("SELECT key, value FROM meta").fetchall())
    c.close()
    check(meta.get("arith") == ARITH and "re-derived" in meta.get("rederived", ""),
          f"written under arithmetic 8, re-derived under {ARITH} ({meta.get('rederived')})")

    # a recorded placement this core would not make: c moved to a new group if it joined one,
    # else into a's group (on a fresh rollout node); structurally one a core could have made
    kd = Loomd(build, "--quiet").start()
    made = []
    for name in ("a", "b", "c"):
        st, j = kd.req("POST", "/v1/jobs", job_spec(name, t_roll=1.0, t_train=1.0, slo=1.5,
                                                     iterations=0))
        check(st == 201, f"job {name} submitted ({st})")
        made.append(j["decision"])
    ids = [m for m in range(1, 4)]
    kd.kill9()
    c = sqlite3.connect(os.path.join(kd.dir, "loom.db"))
    decs = [json.loads(c.execute("SELECT decision FROM jobs WHERE id=?", (i,)).fetchone()[0])
            for i in ids]
    gmax = max(x["group"] for x in decs[:2])
    tmax = max(max(x["train_nodes"]) for x in decs[:2])
    rmax = max(max(x["rollout_nodes"]) for x in decs[:2])
    dec = decs[2]
    if dec["decision"] == "new_group":
        dec.update(decision="direct_pack", group=decs[0]["group"],
                   train_nodes=decs[0]["train_nodes"], rollout_nodes=[rmax + 1])
    else:
        dec.update(decision="new_group", group=gmax + 1, train_nodes=[tmax + 1],
                   rollout_nodes=[rmax + 1])
    want = dec["group"]
    c.execute("UPDATE jobs SET decision=? WHERE id=?", (json.dumps(dec), ids[2]))
    c.commit()
    c.close()
    kd.start()
    st, j = kd.req("GET", f"/v1/jobs/{ids[2]}")
    check(st == 200 and j["decision"]["group"] == want,
          f"loomd starts and keeps the recorded placement (group {j.get('decision')})")
    st, gs = kd.req("GET", "/v1/groups")
    members = {g["id"]: g["members"] for g in gs.get("groups", [])}
    check(st == 200 and ids[2] in members.get(want, []),
          f"the core has the job in group {want} ({st}, {members})")
    kd.stop()
    c = sqlite3.connect(os.path.join(kd.dir, "loom.db"))
    div = dict(c.execute("SELECT key, value FROM meta").fetchall()).get("replay_divergences", "")
    c.close()
    check("1 placements came out otherwise than recorded (1 kept as recorded" in div,
          f"the divergence is recorded ({div!r})")
finally:
    shutil.rmtree(tmp, True)

# ---- 4. owner-only ------------------------------------------------------------------------
tmp = tempfile.mkdtemp(prefix="loomd-store-")
old = os.umask(0o022)
try:
    dd = os.path.join(tmp, "data")  # loomd creates it, as a hand start does
    pf = os.path.join(tmp, "port")

    def hand_start():
        if os.path.exists(pf):
            os.unlink(pf)
        proc = subprocess.Popen([os.path.join(build, "loomd"), "--data-dir", dd, "--listen",
                                 "127.0.0.1:0", "--port-file", pf],
                                stdout=subprocess.DEVNULL,
                                stderr=open(os.path.join(tmp, "stderr"), "a"))
        for _ in range(1000):
            if os.path.exists(pf) and open(pf).read().strip():
                break
            time.sleep(0.01)
        return proc, int(open(pf).read())

    proc, port = hand_start()
    import urllib.request
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/jobs", method="POST",
                                 data=json.dumps(job_spec("p")).encode(),
                                 headers={"Content-Type": "application/json"})
    check(urllib.request.urlopen(req, timeout=30).status == 201, "a job submitted")
    modes = {n: oct(os.stat(os.path.join(dd, n)).st_mode & 0o777) for n in os.listdir(dd)
             if n.startswith(("loom.db", "auth.db"))}
    check(oct(os.stat(dd).st_mode & 0o777) == "0o700" and "loom.db-wal" in modes and
          all(m == "0o600" for m in modes.values()),
          f"data dir {oct(os.stat(dd).st_mode & 0o777)} and files {modes} are owner-only")
    proc.terminate()
    proc.wait(timeout=30)
    c = sqlite3.connect(os.path.join(dd, "loom.db"))
    meta = dict(c.execute("SELECT key, value FROM meta").fetchall())
    c.close()
    said = open(os.path.join(tmp, "stderr")).read()
    check(meta.get("arith") == ARITH and "rederived" not in meta and "re-derived" not in said,
          f"a new data directory is this arithmetic's from the start, nothing re-derived "
          f"({meta.get('arith')}, {meta.get('rederived')})")
    for n in ("loom.db", "loom.db-wal", "loom.db-shm"):
        if os.path.exists(os.path.join(dd, n)):
            os.chmod(os.path.join(dd, n), 0o644)
    proc, _ = hand_start()
    proc.terminate()
    proc.wait(timeout=30)
    check(oct(os.stat(os.path.join(dd, "loom.db")).st_mode & 0o777) == "0o600",
          "a store left 0644 is narrowed to 0600 at the next start")
finally:
    os.umask(old)
    shutil.rmtree(tmp, True)

print("PASS loomd_store")
