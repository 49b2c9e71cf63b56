"""Retries and drift re-admission against a real loomd (docs/operations.md):

- a worker process killed with SIGKILL mid-train and started again by its supervisor takes
  the job over at once (restart 1); killed mid-rollout and started again only after its lease
  timed out, the expiry restarts the job (restart 2); loomd itself is killed and restarted in
  between; the job finishes with every iteration trained into the worker's state exactly once
  and counted exactly once by loomd and in the store;
- a job whose worker is killed and never comes back fails only after its last restart;
- a worker whose job was taken over by another process gets loom.Restarted from its phase;
- a job whose rollouts run twice as long as declared is re-admitted on its observed profile
  after 5 iterations, while the other member of its old group keeps running.
"""

import atexit
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, import_setup, job_spec  # noqa: E402

build, source = sys.argv[1], sys.argv[2]
env = import_setup(build, source)
import loom  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 3.0
d = Loomd(build, "--lease-timeout", str(TIMEOUT), "--quiet").start()
url = d.url()


def wait_for(cond, what, limit=60.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    check(False, what)


def events(wd):
    p = os.path.join(wd, "events")
    return [json.loads(x) for x in open(p)] if os.path.exists(p) else []


def job_info(jid):
    status, body = d.req("GET", f"/v1/jobs/{jid}")
    return body if status == 200 else {}


# ---- 1. kill -9 of the worker, twice, and of loomd in between -------------------------------
N = 4
r = loom.Job.submit(url, job_spec("R", iterations=N))
wd = tempfile.mkdtemp(prefix="loom-retry-")
atexit.register(shutil.rmtree, wd, True)
with open(os.path.join(wd, "plan.json"), "w") as f:
    json.dump({"phase_s": 0.05,
               "hang": {"1": ["train", 2], "2": ["rollout", 3]},
               "delay": {"3": TIMEOUT + 0.5}}, f)
pidfile = os.path.join(wd, "worker.pid")
sup = subprocess.Popen(
    [sys.executable, "-m", "loom.supervise", "--delay", "0.2", "--pid-file", pidfile, "--",
     sys.executable, os.path.join(here, "loomd_retry_worker.py"), url, str(r.id), wd],
    env=env, stderr=open(os.path.join(wd, "supervise.log"), "w"))


def kill_worker_at(inc, phase, it):
    wait_for(lambda: [inc, "hang", phase, it] in events(wd),
             f"incarnation {inc} reaches the {phase} of iteration {it}")
    pid = int(open(pidfile).read())
    os.kill(pid, signal.SIGKILL)
    return pid


pid1 = kill_worker_at(1, "train", 2)
wait_for(lambda: any(e[:2] == [2, "attach"] for e in events(wd)), "the supervisor restarts it")
att = [e for e in events(wd) if e[:2] == [2, "attach"]][0]
check(att[2:] == [1, True, 1],
      "the restarted worker took the job over at once: restart 1, resume after iteration 1")
pid2 = kill_worker_at(2, "rollout", 3)
check(pid2 != pid1, "the second kill hits the new worker process")
info = wait_for(lambda: (lambda i: i if i.get("restarts") == 2 else None)(job_info(r.id)),
                "the lease of the killed worker expires: restart 2", limit=4 * TIMEOUT)
check(info["readmission"]["reason"] == "lease expired" and info["iterations_done"] == 2,
      "restart 2 by lease expiry, after iteration 2")
d.kill9()
d.start(port=d.port)
check(job_info(r.id)["restarts"] == 2, "loomd restarted: the job's restarts survive the restart")
check(sup.wait(timeout=60) == 0, "the third worker finishes the job")
ev = events(wd)
att3 = [e for e in ev if e[:2] == [3, "attach"]][0]
check(att3[2:] == [2, False, 2], "the third worker found no lease left to take over")
done = [e for e in ev if e[1] == "done"]
check(done and done[0][2] == "finished" and done[0][3] == list(range(1, N + 1)),
      f"the worker's state has iterations 1..{N}, each trained in once: {done}")
info = job_info(r.id)
check(info["state"] == "finished" and info["iterations_done"] == N and info["restarts"] == 2,
      f"loomd counted {N} iterations and 2 restarts")
db = sqlite3.connect(os.path.join(d.dir, "loom.db"))
trains = db.execute("SELECT count(*) FROM leases WHERE job=? AND phase='train' AND "
                    "state='released'", (r.id,)).fetchone()[0]
ended = dict(db.execute("SELECT state, count(*) FROM leases WHERE job=? GROUP BY state",
                        (r.id,)).fetchall())
readmits = db.execute("SELECT count(*) FROM log WHERE job=? AND kind='readmit'",
                      (r.id,)).fetchone()[0]
db.close()
check(trains == N, f"the store holds {N} released train leases")
check(ended.get("failed") == 1 and ended.get("expired") == 1 and readmits == 2,
      f"one lease failed by the takeover, one expired, two re-admissions logged: {ended}")

# ---- 2. a worker that never comes back: fails after its last restart -------------------------
x = loom.Job.submit(url, job_spec("X", iterations=3, max_restarts=1))
w = subprocess.Popen(
    [sys.executable, "-c",
     "import sys, time, loom\n"
     "job = loom.Job.attach(sys.argv[1], int(sys.argv[2]))\n"
     "@job.phase('rollout')\n"
     "def rollout():\n"
     "    print('started', flush=True)\n"
     "    time.sleep(60)\n"
     "rollout()\n", url, str(x.id)],
    env=env, stdout=subprocess.PIPE, text=True)
check(w.stdout.readline().strip() == "started", "X's worker holds its rollout lease")
w.send_signal(signal.SIGKILL)
w.wait()
info = wait_for(lambda: (lambda i: i if i.get("restarts") == 1 else None)(job_info(x.id)),
                "X is restarted once", limit=4 * TIMEOUT)
check(info["state"] == "running", "after restart 1 of 1 the job is still live")
info = wait_for(lambda: (lambda i: i if i.get("state") == "failed" else None)(job_info(x.id)),
                "X fails once its permit goes unclaimed", limit=4 * TIMEOUT)
check(info["restarts"] == 1 and info["max_restarts"] == 1, "X failed after its only restart")
# ---- a worker whose job was restarted under it learns where to resume -----------------------
y = loom.Job.submit(url, job_spec("Y", iterations=2))


@y.phase("rollout")
def y_roll():
    pass


@y.phase("train")
def y_train():
    # another worker process takes the job over while this one still trains (split brain)
    other = loom.Job.attach(url, y.id, takeover="rollout")
    check(not other.took_over and other.restarts == 0, "a rollout takeover leaves a train lease")
    other = loom.Job.attach(url, y.id, takeover="train")
    check(other.took_over and other.restarts == 1, "the second worker took the train lease")


y_roll()
try:
    y_train()
    raised = None
except loom.Restarted as e:
    raised = e
check(raised is not None and raised.iterations_done == 0 and raised.resume_iteration == 1,
      "the first worker's phase raises Restarted: resume with the rollout of iteration 1")
y.cancel()
_, metrics = d.req("GET", "/metrics")
check('loom_readmissions_total{cause="restart"} 2' in metrics
      and "loom_jobs_failed_total 1" in metrics,
      "metrics count the restart since loomd's start and the failed job")
check(d.stop() == 0, "loomd stops cleanly")

# ---- 3. drift: rollouts twice as long as declared --------------------------------------------
d2 = Loomd(build, "--lease-timeout", "10", "--quiet").start()
dj = loom.Job.submit(d2.url(), job_spec("D", 0.4, 0.2, 1.5, 6))
bj = loom.Job.submit(d2.url(), job_spec("B", 0.2, 0.4, 1.5, 0))
check(dj.decision["group"] == bj.decision["group"], "D and B share a group")
group = bj.decision["group"]
stop = threading.Event()
b_iters = []


def run_b():
    @bj.phase("rollout")
    def roll():
        time.sleep(0.1)

    @bj.phase("train")
    def train():
        time.sleep(0.1)

    try:
        while not stop.is_set():
            roll()
            train()
            b_iters.append(time.monotonic())
    except loom.JobEnded:
        pass


@dj.phase("rollout")
def d_roll():
    time.sleep(0.8)


@dj.phase("train")
def d_train():
    time.sleep(0.05)


tb = threading.Thread(target=run_b)
tb.start()
for it in range(1, 6):
    d_roll()
    d_train()
info = dj.info()
check(info["resubmits"] == 1 and info["readmission"]["cause"] == "drift",
      f"after 5 long rollouts D is re-admitted: {info['readmission']}")
check(info["profile"]["t_roll_s"] >= 0.75, f"on its observed rollout time ({info['profile']})")
train_ratio = float(info["readmission"]["reason"].split("x the planned train")[0].split()[-1])
check(info["profile"]["t_train_s"] == 0.2 or train_ratio > 1.05,
      "the declared train time is kept unless training ran long too")
check(info["spec"]["t_roll_s"] == 0.4, "the declared spec is kept as it was submitted")
t_readmit = time.monotonic()
_, groups = d2.req("GET", "/v1/groups")
bg = [g for g in groups["groups"] if bj.id in g["members"]]
check(bg and bg[0]["id"] == group, "B stays in its group")
d_roll()
d_train()
check(dj.info()["state"] == "finished" and dj.info()["iterations_done"] == 6,
      "D finishes its 6 iterations in its new placement")
wait_for(lambda: sum(t > t_readmit for t in b_iters) >= 2, "B keeps running", limit=20)
_, metrics = d2.req("GET", "/metrics")
check('loom_readmissions_total{cause="drift"} 1' in metrics, "metrics count the re-admission")
stop.set()
bj.cancel()
tb.join(timeout=30)
check(d2.stop() == 0, "loomd stops cleanly")
