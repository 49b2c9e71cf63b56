"""Leases against a real loomd, driven through the Python package (and so libloomclient):

- a worker killed mid-phase: its lease expires within one lease timeout, the job (allowed no
  restarts) is marked failed, its group's other job gets the node and carries on;
- a phase longer than the lease timeout survives on the background heartbeat;
- an exception in a phase releases it as failed;
- loomd killed with SIGKILL mid-phase and restarted: the phase is redone, counted once;
- a job whose worker is gone is resubmitted as a new arrival.
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, import_setup, job_spec, weave_groups  # noqa: E402

build, source = sys.argv[1], sys.argv[2]
env = import_setup(build, source)
import loom  # noqa: E402

TIMEOUT = 2.0
d = Loomd(build, "--cluster", weave_groups(), "--lease-timeout", str(TIMEOUT), "--quiet").start()
url = d.url()

# SLOs that absorb the round a join adds to a job in its last iterations (policy.join_wait)
a = loom.Job.submit(url, job_spec("A", 2, 1, 2.5, 3, max_restarts=0))
b = loom.Job.submit(url, job_spec("B", 1, 2, 2.5, 1))
check(a.decision["group"] == b.decision["group"], "A and B share a group")

worker = subprocess.Popen(
    [sys.executable, "-c",
     "import sys, time, loom\n"
     "job = loom.Job.attach(sys.argv[1], 1)\n"
     "@job.phase('rollout')\n"
     "def rollout():\n"
     "    print('started', flush=True)\n"
     "    time.sleep(60)\n"
     "rollout()\n", url],
    env=env, stdout=subprocess.PIPE, text=True)
check(worker.stdout.readline().strip() == "started", "A's worker holds its rollout lease")
worker.kill()
worker.wait()
t0 = time.monotonic()
lease = b.acquire("rollout", wait_s=10 * TIMEOUT)
dt = time.monotonic() - t0
check(lease is not None, f"B gets the rollout node {dt:.2f} s after A's worker died "
                         f"(lease timeout {TIMEOUT} s)")
info = a.info()
check(info["state"] == "failed", "A is marked failed")
_, groups = d.req("GET", "/v1/groups")
check(groups["groups"][0]["members"] == [b.id], "the group keeps B and only B")
b.release()
check(b.acquire("train", wait_s=5) is not None, "B trains")
b.release()
check(b.info()["state"] == "finished", "B finishes its iteration")

# a phase longer than the lease timeout lives on the heartbeat
c = loom.Job.submit(url, job_spec("C", iterations=1, max_restarts=0))


@c.phase("rollout")
def slow_rollout():
    time.sleep(2.5 * TIMEOUT)
    return "done"


check(slow_rollout() == "done" and c.info()["state"] == "running",
      "a rollout of 2.5 lease timeouts is kept alive by the background heartbeat")


@c.phase("train")
def failing_train():
    raise RuntimeError("diverged")


try:
    failing_train()
    raised = False
except RuntimeError:
    raised = True
check(raised and c.info()["state"] == "failed", "an exception in a phase fails the job")

# progress and tail-migration advice through the package
e = loom.Job.submit(url, job_spec("E", 2, 1, 2.5, 1))
f = loom.Job.submit(url, job_spec("F", 1, 2, 2.5, 1))
advice = []


calls = []


@e.phase("rollout", warm_start=lambda l: calls.append(("load", l.phase, l.gpus)),
         offload=lambda l: calls.append(("offload", l.phase)))
def rollout_e():
    calls.append(("run",))
    advice.append(e.progress(1, 10))
    advice.append(e.progress(9, 10))


waiter = subprocess.Popen(
    [sys.executable, "-c",
     "import sys, loom\n"
     "job = loom.Job.attach(sys.argv[1], int(sys.argv[2]))\n"
     "print('granted' if job.acquire('rollout', wait_s=20) else 'timeout', flush=True)\n",
     url, str(f.id)], env=env, stdout=subprocess.PIPE, text=True)
time.sleep(0.5)
rollout_e()
check(not advice[0].migrate_tail and advice[1].migrate_tail and advice[1].keep_gpus >= 1,
      "progress past the threshold with F waiting returns migrate_tail")
check(waiter.stdout.readline().strip() == "granted", "F's rollout started on the freed GPUs")
check(calls == [("load", "rollout", 8), ("run",), ("offload", "rollout")],
      "the shim warm-starts with the granted lease, runs, then offloads")
waiter.wait()

# loomd killed mid-phase: the phase is redone once, the iteration counted once
g = loom.Job.submit(url, job_spec("G", 1, 1, 1.0, 1, mem_rollout_gb=1))
runs = []


@g.phase("rollout")
def rollout_g():
    runs.append(time.monotonic())
    if len(runs) == 1:
        d.kill9()
        d.start(port=d.port)


rollout_g()
check(len(runs) == 2, "after a loomd restart mid-phase the phase ran again")


@g.phase("train")
def train_g():
    pass


train_g()
info = g.info()
check(info["state"] == "finished" and info["iterations_done"] == 1,
      "the job finished with its one iteration counted once")

# resubmission: a failed job comes back as a new arrival
a2 = loom.Job.submit(url, job_spec("A", 2, 1, 1.5, 1))
check(a2.id not in (a.id, b.id) and a2.decision["decision"] in ("new_group", "direct_pack"),
      "resubmitted A is placed again as a new job")
check(d.stop() == 0, "loomd stops cleanly")
