"""The worker process of loomd_retry_test.py, run under ``python -m loom.supervise``.

Each start is one incarnation: it attaches to its job (taking over from a dead predecessor),
loads the checkpoint of the last iteration loomd counted, and runs rollout + train until the
job ends. Its "model" is the list of iterations trained into it; a checkpoint per iteration is
saved inside the train phase, before the lease is released. plan.json in the work dir says
where an incarnation hangs (for the test to kill -9 it) and how long it waits before attaching.
Every step is appended to the events file as a JSON line.

Usage: loomd_retry_worker.py URL JOB_ID WORK_DIR
"""

import json
import os
import sys
import time

import loom

url, job_id, wd = sys.argv[1], int(sys.argv[2]), sys.argv[3]
inc_path = os.path.join(wd, "incarnation")
inc = int(open(inc_path).read()) + 1 if os.path.exists(inc_path) else 1
with open(inc_path, "w") as f:
    f.write(str(inc))
plan = json.load(open(os.path.join(wd, "plan.json")))
events = open(os.path.join(wd, "events"), "a")


def note(*what):
    events.write(json.dumps([inc] + list(what)) + "\n")
    events.flush()


def ckpt_path(i):
    return os.path.join(wd, f"ckpt-{i}")


def load(i):
    return json.load(open(ckpt_path(i))) if i > 0 else {"trained": []}


time.sleep(plan.get("delay", {}).get(str(inc), 0))
job = loom.Job.attach(url, job_id, takeover=True)
note("attach", job.iterations_done, job.took_over, job.restarts)
state = load(job.iterations_done)
hang = plan.get("hang", {}).get(str(inc))


def maybe_hang(phase, it):
    if hang == [phase, it]:
        note("hang", phase, it)
        time.sleep(3600)


@job.phase("rollout")
def rollout():
    maybe_hang("rollout", job.lease.iteration)
    time.sleep(plan["phase_s"])


@job.phase("train")
def train():
    it = job.lease.iteration
    maybe_hang("train", it)
    time.sleep(plan["phase_s"])
    state["trained"].append(it)
    with open(ckpt_path(it) + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(ckpt_path(it) + ".tmp", ckpt_path(it))


while not job.done:
    try:
        rollout()
        train()
    except loom.Restarted as r:
        note("restarted", r.iterations_done)
        state = load(r.iterations_done)
note("done", job.info()["state"], state["trained"])
