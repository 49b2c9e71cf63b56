#!/usr/bin/env python3
"""A worker as an executor launches it (docs/slurm.md): the permit loop of one pool's phase.

Environment (set by loomd's executor): LOOM_URL, LOOM_JOB, LOOM_PHASE (rollout|train),
LOOM_TOKEN and LOOM_SYNC_KEY when loomd authenticates,
LOOM_NODE_RANK, LOOM_GPUS, LOOM_GRACE_S; under Slurm also SLURMD_NODENAME, SLURM_JOB_ID,
SLURM_STEP_ID, CUDA_VISIBLE_DEVICES. Rank 0 acquires its phase, works PHASE_S seconds, releases,
and again until its job has ended; other ranks wait for the end. A worker that cannot reach
loomd for LOOM_GRACE_S seconds (default 60) exits (status 3). One line per phase on stdout.
Usage: exec_worker.py PHASE_S
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request

URL = os.environ["LOOM_URL"]
JOB = int(os.environ["LOOM_JOB"])
PHASE = os.environ["LOOM_PHASE"]
RANK = int(os.environ.get("LOOM_NODE_RANK", "0"))
WORK_S = float(sys.argv[1]) if len(sys.argv) > 1 else 0.2
GRACE_S = float(os.environ.get("LOOM_GRACE_S", "60"))
last_seen = time.monotonic()


def unreachable():
    """loomd did not answer: wait a little, or exit once it has been gone for GRACE_S."""
    if time.monotonic() - last_seen > GRACE_S:
        say("loomd unreachable for %.0f s: exiting" % GRACE_S)
        sys.exit(3)
    time.sleep(0.2)


def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, data=data, method=method)
    if os.environ.get("LOOM_TOKEN"):  # set by the executor when loomd authenticates
        req.add_header("Authorization", "Bearer " + os.environ["LOOM_TOKEN"])
    global last_seen
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read()
            last_seen = time.monotonic()
            return r.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        text = e.read()
        last_seen = time.monotonic()
        return e.code, json.loads(text) if text else None


def live():
    while True:
        try:
            st, j = call("GET", "/v1/jobs/%d" % JOB)
            return st == 200 and j["state"] in ("queued", "running")
        except (urllib.error.URLError, OSError):  # loomd restarting
            unreachable()


def say(what):
    print("%.3f job %d %s rank %d %s pid %d node %s slurm %s.%s gpus %s" % (
        time.time(), JOB, PHASE, RANK, what, os.getpid(), os.environ.get("SLURMD_NODENAME", "-"),
        os.environ.get("SLURM_JOB_ID", "-"), os.environ.get("SLURM_STEP_ID", "-"),
        os.environ.get("CUDA_VISIBLE_DEVICES", "-")), flush=True)


def main():
    say("start")
    if RANK > 0:
        while live():
            time.sleep(0.5)
        return 0
    while True:
        try:
            st, lease = call("POST", "/v1/jobs/%d/phases/%s/acquire?wait=5" % (JOB, PHASE))
        except (urllib.error.URLError, OSError):
            unreachable()  # loomd is restarting
            continue
        if st == 204:
            continue
        if st == 409:
            if not live():
                say("end")
                return 0
            time.sleep(0.05)  # the other pool's phase is next
            continue
        if st != 200:
            say("refused %d %s" % (st, lease))
            return 1
        say("iteration %d" % lease["iteration"])
        time.sleep(WORK_S)
        try:
            st, _ = call("POST", "/v1/leases/%d/release" % lease["lease"], {"status": "ok"})
        except (urllib.error.URLError, OSError):
            unreachable()
            continue  # lost with a loomd restart: acquire again
        if st not in (200, 410):
            say("release refused %d" % st)
            return 1


if __name__ == "__main__":
    sys.exit(main())
