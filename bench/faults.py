"""Fault campaign against live jobs (bench/faults.sh; not part of `make test`).

N faults of five kinds at random (seeded) moments while jobs run under loomd:
  loomd     kill -9 of loomd, restarted at once
  worker    kill -9 of a job's worker, restarted (it attaches and takes over)
  state     kill -9 of loom-state while a client offloads to its disk tier, restarted
  diskfull  the store's file system (a small tmpfs) filled to the last byte for a moment:
            loomd must stay up (writes get 503 meanwhile) and take writes again by itself
  sigstop   a worker frozen with SIGSTOP past its lease, then resumed
Jobs are submitted continuously (each a few iterations), so faults meet every phase.

At the end (faults stopped, every job given time to end): every job is finished with exactly
its iterations (loomd's count, the train leases released in the store) or failed with a reason
after its retries; no acknowledged write is lost (every train release a worker saw
acknowledged is counted, every offload loom-state acknowledged loads back bit for bit); loomd
never exited on a storage error (counted; must be 0), and how often it refused writes while the
disk was full and took them again without a restart is counted. loomd must start after every
fault (a start that fails is counted and must be 0; one that keeps failing ends the campaign at
once with loomd's error, exit 2), and no restart's replay may diverge from what loomd recorded
(counted from its log; must be 0). Prints the counts.
Usage: faults.py BUILD_DIR SOURCE_DIR [--faults N] [--seed S] [--jobs J]"""
import argparse
import hashlib
import http.client as http_client
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("build")
ap.add_argument("source")
ap.add_argument("--faults", type=int, default=1000)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--jobs", type=int, default=4, help="jobs live at once")
ap.add_argument("--iterations", type=int, default=4)
a = ap.parse_args()
rng = random.Random(a.seed)
sys.path.insert(0, os.path.join(a.source, "python"))
env = dict(os.environ, PYTHONPATH=os.path.join(a.source, "python"),
           LOOM_CLIENT_LIB=os.path.join(a.build, "libloomclient.so"),
           LOOM_STATE_LIB=os.path.join(a.build, "libloomstate.so"))
os.environ.update(env)
import numpy as np  # noqa: E402
from loom import state as lstate  # noqa: E402

root = tempfile.mkdtemp(prefix="loom-faults-")
data = os.path.join(root, "data")
os.makedirs(data)
tmpfs = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", data],
                       capture_output=True).returncode == 0
LEASE_S = 1.5
counts = {k: 0 for k in ("loomd", "worker", "state", "diskfull", "sigstop")}
exits_storage = 0
start_failures = 0  # loomd starts that exited (a store it refused), retried
degraded_seen = 0  # disk-full faults during which /healthz said the store refused writes
recovered = 0  # of those, loomd took writes again by itself once space was back
procs = {}


def free_port():
    s_ = socket.socket()
    s_.bind(("127.0.0.1", 0))
    n = s_.getsockname()[1]
    s_.close()
    return n


PORT = free_port()  # the same across restarts: workers keep their URL


def start_loomd():
    pf = os.path.join(root, "port")
    if os.path.exists(pf):
        os.unlink(pf)
    p = subprocess.Popen([os.path.join(a.build, "loomd"), "--data-dir", data, "--listen",
                          f"127.0.0.1:{PORT}", "--port-file", pf, "--lease-timeout", str(LEASE_S),
                          ], stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(root, "loomd.err"), "a"))
    for _ in range(3000):
        if os.path.exists(pf) and open(pf).read().strip():
            return p, int(open(pf).read())
        if p.poll() is not None:
            return p, None
        time.sleep(0.01)
    p.kill()  # never two on one data directory
    p.wait()
    return p, None


START_TRIES = 50  # about 10 s of a loomd that will not come up: a failure, not a wait


def start_error():
    """The last lines loomd wrote before it exited."""
    try:
        lines = open(os.path.join(root, "loomd.err")).read().strip().splitlines()
    except OSError:
        return "(no output)"
    return "\n".join(lines[-3:])


def ensure_loomd():
    """loomd up; counts an exit on a storage error (status 3). A loomd that cannot start (it
    refuses its own store, say) ends the campaign with its error: every fault must leave a
    store it starts on."""
    global exits_storage, loomd, port, start_failures
    tries = 0
    while loomd.poll() is not None or port is None:
        if loomd.poll() == 3:
            exits_storage += 1
        elif loomd.poll() is not None:
            start_failures += 1
        tries += 1
        if tries > START_TRIES:
            print(f"FAIL: loomd does not start on the store the faults left "
                  f"({START_TRIES} tries, status {loomd.poll()}):\n{start_error()}", flush=True)
            if os.environ.get("LOOM_FAULTS_KEEP"):
                print("kept", root)
            os._exit(2)
        loomd, port = start_loomd()
        if port is None:
            time.sleep(0.2)


loomd, port = start_loomd()
acks = os.path.join(root, "acks")
open(acks, "w").close()
jobs = {}  # id -> target


def http(method, path, body=None):
    """(status, JSON) from loomd, or (0, None) when it is away."""
    try:
        c = http_client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request(method, path, body=json.dumps(body) if body is not None else None)
        r = c.getresponse()
        out = r.status, json.loads(r.read() or b"null")
        c.close()
        return out
    except (OSError, ValueError, http_client.HTTPException):
        return 0, None


def submit():
    for k in range(200):
        ensure_loomd()
        st, j = http("POST", "/v1/jobs", {"name": f"f{len(jobs)}", "rollout_gpus": 8,
                                           "train_gpus": 8, "t_roll_s": 0.05, "t_train_s": 0.05,
                                           "slo": 3.0, "iterations": a.iterations,
                                           "max_restarts": 50})
        if st == 201:
            jobs[j["id"]] = a.iterations
            return j["id"]
        time.sleep(0.1)
    raise SystemExit("cannot submit")


def start_worker(jid):
    procs[jid] = subprocess.Popen(
        [sys.executable, os.path.join(a.source, "bench", "faults_worker.py"),
         f"http://127.0.0.1:{port}", str(jid), acks, "0.02"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def job_state(jid):
    st, j = http("GET", f"/v1/jobs/{jid}")
    return j["state"] if st == 200 else "unknown"


# loom-state and a client offloading to its disk tier; acknowledged versions are recorded
sdir = os.path.join(root, "state")
sock = os.path.join(sdir, "loom-state.sock")


def start_state():
    p = subprocess.Popen([os.path.join(a.build, "loom-state"), "--dir", sdir, "--host-bytes",
                          "64M", "--disk-bytes", "256M", "--no-mlock", "--quiet"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(1000):  # the old socket file may still be there: wait for a listener
        try:
            probe = socket.socket(socket.AF_UNIX)
            probe.connect(sock)
            probe.close()
            break
        except OSError:
            time.sleep(0.01)
    return p


st_proc = start_state()
offloader = subprocess.Popen([sys.executable, "-c", f"""
import hashlib, os, sys, time
import numpy as np
from loom import state
acks = open({os.path.join(root, 'state-acks')!r}, "a")
v = 0
while True:
    try:
        c = state.Client({sock!r})
        while True:
            v += 1
            t = np.frombuffer(hashlib.sha256(str(v).encode()).digest() * 8192, np.uint8).copy()
            c.offload({{"w": t}}, job="s", version=v, tier="disk")
            acks.write(f"{{v}} {{hashlib.sha256(t.tobytes()).hexdigest()}}\\n")
            acks.flush()
            if v > 8:
                c.drop("s", v - 8)
    except Exception:
        time.sleep(0.05)
"""], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

def cleanup():
    for p in list(procs.values()) + [offloader, st_proc, loomd]:
        if p.poll() is None:
            p.kill()
    if tmpfs:
        subprocess.run(["umount", "-l", data])


import atexit  # noqa: E402
atexit.register(cleanup)
for _ in range(a.jobs):
    start_worker(submit())
t0 = time.time()
kinds = list(counts)
for n in range(a.faults):
    time.sleep(rng.uniform(0.05, 0.3))
    ensure_loomd()
    for j, p in list(procs.items()):  # a worker whose job ended leaves; a new job comes
        if p.poll() is not None:
            s = job_state(j)
            del procs[j]
            if s in ("queued", "running", "unknown"):
                start_worker(j)
            else:
                start_worker(submit())
    live = [j for j, p in procs.items() if p.poll() is None]
    kind = kinds[n % len(kinds)] if n < len(kinds) else rng.choice(kinds)
    counts[kind] += 1
    if kind == "loomd":
        loomd.send_signal(signal.SIGKILL)
        loomd.wait()
        loomd, port = start_loomd()
        ensure_loomd()  # it must start on what the kill left
    elif kind == "worker" and live:
        j = rng.choice(live)
        procs[j].send_signal(signal.SIGKILL)
        procs[j].wait()
        start_worker(j)
    elif kind == "state":
        st_proc.send_signal(signal.SIGKILL)
        st_proc.wait()
        st_proc = start_state()
    elif kind == "diskfull":
        if tmpfs:
            filler = os.path.join(data, "filler")
            subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            until = time.time() + rng.uniform(0.2, 0.6)
            degraded = False
            while time.time() < until:
                _, h = http("GET", "/healthz")
                degraded = degraded or bool(h and h.get("status") == "degraded")
                time.sleep(0.05)
            os.unlink(filler)
            if degraded:
                degraded_seen += 1
                back = time.time() + 5
                while time.time() < back:
                    _, h = http("GET", "/healthz")
                    if h and h.get("status") == "ok":
                        recovered += 1
                        break
                    time.sleep(0.05)
    elif kind == "sigstop" and live:
        j = rng.choice(live)
        procs[j].send_signal(signal.SIGSTOP)
        time.sleep(LEASE_S + 0.5)
        procs[j].send_signal(signal.SIGCONT)
    if (n + 1) % 100 == 0:
        print(f"  {n + 1} faults, {time.time() - t0:.0f} s, {len(jobs)} jobs so far, loomd "
              f"exits on storage errors {exits_storage}", flush=True)

# quiesce: every job ends
deadline = time.time() + 120
while time.time() < deadline:
    ensure_loomd()
    for j, p in list(procs.items()):
        if p.poll() is not None and job_state(j) in ("queued", "running"):
            start_worker(j)
    if all(job_state(j) not in ("queued", "running", "unknown") for j in jobs):
        break
    time.sleep(0.5)
for p in procs.values():
    p.kill()
offloader.kill()
if loomd.poll() == 3:
    exits_storage += 1
loomd.send_signal(signal.SIGTERM)
loomd.wait()

# every restart replayed the log to the placements loomd had made (docs/operations.md,
# "replay divergences"): a divergence means some input to placement is not in the log
err_text = open(os.path.join(root, "loomd.err")).read()
divergences = err_text.count("its recorded placement is kept") + \
    err_text.count("the recorded placement cannot be applied") + \
    err_text.count("learned its profile otherwise")
restarts_seen = err_text.count("recovered ")
db = sqlite3.connect(os.path.join(data, "loom.db"))
acked = {}
for line in open(acks):
    j, i = map(int, line.split())
    acked[j] = max(acked.get(j, 0), i)
exact = failed = wrong = lost = 0
for jid, state_, target, done in db.execute("SELECT id, state, target, done FROM jobs"):
    trains = db.execute("SELECT count(*) FROM leases WHERE job=? AND phase='train' AND "
                        "state='released'", (jid,)).fetchone()[0]
    why = db.execute("SELECT why FROM admissions WHERE job=?", (jid,)).fetchone()
    if acked.get(jid, 0) > done:
        lost += 1
    if state_ == "finished" and done == target == trains:
        exact += 1
    elif state_ == "failed" and why and why[0]:
        failed += 1
    else:
        wrong += 1
        print(f"  job {jid}: {state_}, done {done} of {target}, {trains} train releases")
# loom-state: the acknowledged versions still kept load back bit for bit
st_proc.send_signal(signal.SIGKILL)
st_proc.wait()
st_proc = start_state()
vers = [tuple(line.split()) for line in open(os.path.join(root, "state-acks"))]
state_lost = 0
c = lstate.Client(sock)
for v, digest in vers[-8:]:
    t = np.zeros(32 * 8192, np.uint8)
    try:
        c.load({"w": t}, job="s", version=int(v))
        state_lost += hashlib.sha256(t.tobytes()).hexdigest() != digest
    except lstate.StateError:
        state_lost += 1
st_proc.kill()
emulated = tmpfs
if tmpfs:
    subprocess.run(["umount", "-l", data])
    tmpfs = False
print(json.dumps({"faults": counts, "jobs": len(jobs), "finished_exactly": exact,
                  "failed_with_reason": failed, "wrong": wrong,
                  "acked_train_releases_lost": lost, "state_offloads_acked": len(vers),
                  "state_acked_lost_of_last_8": state_lost,
                  "loomd_exits_on_storage_error": exits_storage,
                  "loomd_start_failures": start_failures, "loomd_recoveries": restarts_seen,
                  "replay_divergences": divergences,
                  "diskfull_refused_writes": degraded_seen,
                  "diskfull_recovered_without_restart": recovered,
                  "diskfull_emulated": emulated, "seconds": round(time.time() - t0)}))
if not os.environ.get("LOOM_FAULTS_KEEP"):
    subprocess.run(["rm", "-rf", root])
else:
    print("kept", root)
sys.exit(1 if wrong or lost or state_lost or exits_storage or start_failures or divergences
         else 0)
