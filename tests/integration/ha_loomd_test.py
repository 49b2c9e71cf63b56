"""Three loomd replicas on three etcd members, live jobs, and the faults of docs/ha.md.

argv: build, src, etcd endpoints (comma-separated URLs), a scratch folder, the etcd pids (in
endpoint order). Each fault is checked against what clients see: a follower redirects, a new
leader takes over and grants the next permit, a paused leader that wakes after its lease exits
(status 4) without writing, jobs go on while etcd's leader is killed, and in the end every job
has exactly its iterations: loomd's count, and each iteration's phases run once by the workers.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

build, src, eps, tmp = sys.argv[1:5]
etcd_pids = [int(p) for p in sys.argv[5:]]
TTL = 2
JOBS, ITERS = 3, 80


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ports = [free_port() for _ in range(3)]
urls = ["http://127.0.0.1:%d" % p for p in ports]
procs = [None, None, None]
store = "etcd://" + ",".join(e.replace("http://", "") for e in eps.split(","))


def start(i):
    log = open(os.path.join(tmp, "r%d.log" % i), "ab")
    procs[i] = subprocess.Popen(
        [os.path.join(build, "loomd"), "--data-dir", os.path.join(tmp, "r%d" % i),
         "--listen", "127.0.0.1:%d" % ports[i], "--store", store, "--ha-name", "test",
         "--ha-ttl", str(TTL), "--ha-snapshot", "50", "--insecure-loopback"], stderr=log, stdout=log)


def get(url, path):
    try:
        with urllib.request.urlopen(url + path, timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
    except (urllib.error.URLError, OSError):
        return 0, None


def leader(exclude=()):
    for i, u in enumerate(urls):
        if i in exclude or procs[i] is None or procs[i].poll() is not None:
            continue
        st, h = get(u, "/healthz")
        if st == 200 and h.get("role") == "leader":
            return i
    return None


def wait_leader(exclude=(), timeout=20):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        i = leader(exclude)
        if i is not None:
            return i, time.monotonic() - t0
        time.sleep(0.02)
    sys.exit("FAIL: no replica leads %.0f s after the fault" % timeout)


def progress(i):
    st, j = get(urls[i], "/v1/jobs")
    return sum(x["iterations_done"] for x in j["jobs"]) if st == 200 else -1


def fail(msg):
    for i in range(3):
        p = os.path.join(tmp, "r%d.log" % i)
        if os.path.exists(p):
            print("--- r%d.log" % i)
            print(open(p).read()[-3000:])
    sys.exit("FAIL: " + msg)


workers = []
try:
    for i in range(3):
        start(i)
        time.sleep(0.3)
    lead, _ = wait_leader()
    follower = (lead + 1) % 3
    st, h = get(urls[follower], "/healthz")
    time.sleep(1.5)  # the follower's view of the leader refreshes each second
    st, h = get(urls[follower], "/healthz")
    if h.get("role") != "follower" or h.get("leader") != urls[lead]:
        fail("follower's /healthz: %s" % h)
    # a submit sent to a follower is redirected to the leader (307, same method)
    ids = []
    for k in range(JOBS):
        body = json.dumps({"name": "j%d" % k, "rollout_gpus": 8, "train_gpus": 8,
                           "t_roll_s": 2, "t_train_s": 1, "iterations": ITERS,
                           "slo": 3}).encode()
        req = urllib.request.Request(urls[follower] + "/v1/jobs", data=body, method="POST")
        req.add_header("Idempotency-Key", "ha-test-%d" % k)
        try:
            urllib.request.urlopen(req, timeout=5)
            fail("a follower accepted a submit")
        except urllib.error.HTTPError as e:
            if e.code != 307 or e.headers["Location"] != urls[lead] + "/v1/jobs":
                fail("follower answered %d %s" % (e.code, e.headers.get("Location")))
            req = urllib.request.Request(e.headers["Location"], data=body, method="POST")
            req.add_header("Idempotency-Key", "ha-test-%d" % k)
            with urllib.request.urlopen(req, timeout=5) as r:
                ids.append(json.loads(r.read())["id"])
    st, c = get(urls[lead], "/v1/cluster")
    if c.get("replication", {}).get("leader") != urls[lead]:
        fail("/v1/cluster does not name the leader: %s" % c.get("replication"))
    # `loom cluster`, given every replica (a follower first), names the leader
    order = [urls[follower]] + [u for u in urls if u != urls[follower]]
    out = subprocess.run([os.path.join(build, "loom"), "cluster", "--server", ",".join(order)],
                         capture_output=True, text=True)
    if out.returncode != 0 or "the leader is %s" % urls[lead] not in out.stdout:
        fail("loom cluster does not name the leader: %r %r" % (out.stdout, out.stderr))
    env = dict(os.environ, LOOM_URL=",".join(urls), LOOM_GRACE_S="60")
    for j in ids:
        for ph in ("rollout", "train"):
            out = open(os.path.join(tmp, "w%d-%s.out" % (j, ph)), "wb")
            workers.append(subprocess.Popen(
                [sys.executable, os.path.join(src, "src/exec/loom-worker"), "0.03"],
                env=dict(env, LOOM_JOB=str(j), LOOM_PHASE=ph), stdout=out,
                stderr=subprocess.STDOUT))

    def led_progress():
        """Iterations done, as whichever replica leads now says (-1: none answers)."""
        i = leader()
        return progress(i) if i is not None else -1

    def wait_progress(i, more=3, timeout=20):
        """more iterations done within timeout, by the leader (i: the one expected, for the
        message)."""
        t0 = time.monotonic()
        base = led_progress()
        while base < 0 and time.monotonic() - t0 < timeout:
            time.sleep(0.05)
            base = led_progress()
        while time.monotonic() - t0 < timeout:
            if led_progress() >= base + more:
                return
            time.sleep(0.05)
        fail("no progress (replica %d was expected to lead)" % i)

    wait_progress(lead)

    # 1. kill -9 of the leader: another takes over; the next permit comes from it
    before = progress(lead)
    procs[lead].kill()
    procs[lead].wait()
    t0 = time.monotonic()
    new, took = wait_leader(exclude=(lead,))
    while progress(new) <= before and time.monotonic() - t0 < 20:
        time.sleep(0.02)
    print("kill -9 of the leader: replica %d leads after %.2f s, progress after %.2f s" %
          (new, took, time.monotonic() - t0))
    # a replica started later joins as a follower of the new leader
    start(lead)
    time.sleep(2.5)
    st, h = get(urls[lead], "/healthz")
    if h is None or h.get("role") != "follower" or h.get("leader") != urls[new]:
        fail("a replica started later: %s" % h)
    wait_progress(new)

    # 2. SIGSTOP of the leader past its lease: another leads; woken, it exits 4 unwritten
    paused = new
    procs[paused].send_signal(signal.SIGSTOP)
    new, took = wait_leader(exclude=(paused,), timeout=TTL * 5 + 10)
    print("leader paused: replica %d leads after %.2f s" % (new, took))
    wait_progress(new, timeout=40)  # workers give up on the paused one after their timeout
    procs[paused].send_signal(signal.SIGCONT)
    try:
        rc = procs[paused].wait(timeout=10)
    except subprocess.TimeoutExpired:
        fail("a leader woken after its lease lapsed is still running")
    if rc != 4:
        fail("a deposed leader exited %d, not 4" % rc)
    print("the paused leader, woken, exited %d" % rc)
    start(paused)
    wait_progress(new)

    # 3. kill -9 of etcd's own leader: jobs go on
    st = subprocess.run(["etcdctl", "--endpoints", eps, "endpoint", "status", "-w", "json"],
                        capture_output=True, text=True, env=dict(os.environ, ETCDCTL_API="3"))
    status = json.loads(st.stdout)
    lead_member = [k for k, s in enumerate(status)
                   if s["Status"]["header"]["member_id"] == s["Status"]["leader"]]
    if not lead_member:
        fail("etcd names no leader: %s" % st.stdout)
    os.kill(etcd_pids[lead_member[0]], signal.SIGKILL)
    print("killed etcd's leader (member %d)" % (lead_member[0] + 1))
    # etcd's own election may outlast loomd's lease: its leader then steps down (exit 4) and,
    # as under systemd's Restart=always, comes back as a follower
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30:
        for i in range(3):
            if procs[i].poll() is not None:
                if procs[i].returncode != 4:
                    fail("replica %d exited %d after etcd's leader died" % (i, procs[i].returncode))
                start(i)
        if led_progress() >= 0:
            break
        time.sleep(0.1)
    wait_progress(-1, timeout=30)

    # every job finishes with exactly its iterations
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        i = leader()
        st, j = get(urls[i], "/v1/jobs") if i is not None else (0, None)
        if st == 200 and all(x["state"] not in ("queued", "running") for x in j["jobs"]):
            break
        time.sleep(0.2)
    else:
        fail("jobs did not finish")
    for x in j["jobs"]:
        if x["state"] != "finished" or x["iterations_done"] != ITERS:
            fail("job %s: %s with %d of %d iterations" %
                 (x["id"], x["state"], x["iterations_done"], ITERS))
    for w in workers:
        if w.wait(timeout=30) != 0:
            fail("a worker exited %d" % w.returncode)
    reruns = 0
    for jid in ids:
        for ph in ("rollout", "train"):
            text = open(os.path.join(tmp, "w%d-%s.out" % (jid, ph))).read()
            its = [int(m) for m in re.findall(r" iteration (\d+)", text)]
            if set(its) != set(range(1, ITERS + 1)):
                fail("job %d %s never ran iterations %s" % (
                    jid, ph, sorted(set(range(1, ITERS + 1)) - set(its))))
            reruns += len(its) - ITERS
    # a phase in flight at a takeover keeps its lease and its pool (loom_sched_resume, docs/ha.md);
    # it runs again only where its lease cannot be kept (its job moved on): none is expected
    # here, and at most one per pool per takeover is tolerated
    if reruns > 2 * JOBS * 2:
        fail("%d phases ran again after two takeovers" % reruns)
    # the log stays bounded: snapshots every 50 commits drop what they cover
    keys = subprocess.run(["etcdctl", "--endpoints", eps, "get", "--prefix", "loom/test/log/",
                           "--keys-only"], capture_output=True, text=True,
                          env=dict(os.environ, ETCDCTL_API="3")).stdout.split()
    if len(keys) > 100:
        fail("%d log entries left in etcd with a snapshot every 50 commits" % len(keys))
    print("log entries left in etcd: %d" % len(keys))
    print("every job finished with exactly its iterations: yes (phases run again after a "
          "takeover: %d)" % reruns)

    # tokens: one created on a replica's host reaches the others, a revocation on another
    # reaches it back (each replica's auth.db, shared through etcd every 2 s)
    def tokens(i):
        out = subprocess.run([os.path.join(build, "loomd"), "token", "list", "--data-dir",
                              os.path.join(tmp, "r%d" % i)], capture_output=True, text=True)
        return [ln.split() for ln in out.stdout.splitlines()[1:] if ln.strip()]

    def wait_tokens(i, pred, what):
        t0 = time.monotonic()
        while time.monotonic() - t0 < 15:
            rows = [t for t in tokens(i) if "team-ha" in t]
            if pred(rows):
                return rows
            time.sleep(0.2)
        fail("replica %d: %s (rows %s)" % (i, what, tokens(i)))

    made = subprocess.run([os.path.join(build, "loomd"), "token", "create", "--data-dir",
                           os.path.join(tmp, "r0"), "--tenant", "team-ha"],
                          capture_output=True, text=True)
    if made.returncode != 0 or not made.stdout.startswith("loom_t_"):
        fail("token create: %s" % made.stderr)
    t0 = time.monotonic()
    rows = wait_tokens(2, lambda r: len(r) == 1 and "active" in r[0], "the token did not arrive")
    print("a token created on replica 0 is on replica 2 after %.1f s" % (time.monotonic() - t0))
    rev = subprocess.run([os.path.join(build, "loomd"), "token", "revoke", "--data-dir",
                          os.path.join(tmp, "r2"), rows[0][0]], capture_output=True, text=True)
    if rev.returncode != 0:
        fail("token revoke on replica 2: %s" % rev.stderr)
    wait_tokens(0, lambda r: len(r) == 1 and "revoked" in r[0], "the revocation did not arrive")
    wait_tokens(1, lambda r: len(r) == 1 and "revoked" in r[0], "the revocation did not arrive")
    print("its revocation on replica 2 reached replicas 0 and 1")

    # the store's secret: a replica's data dir refuses a local rotation (its store is rebuilt
    # from the log at start); with every replica stopped, --store writes it through the log, and
    # a replica started afterwards holds it
    def secret(i):
        import sqlite3
        db = sqlite3.connect(os.path.join(tmp, "r%d" % i, "loom.db"))
        try:
            return db.execute("SELECT value FROM meta WHERE key = 'auth_secret'").fetchone()[0]
        finally:
            db.close()

    for p in procs:
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.terminate()
            p.wait(timeout=10)
    before = secret(1)
    loomd = os.path.join(build, "loomd")
    local = subprocess.run([loomd, "token", "rotate-secret", "--data-dir",
                            os.path.join(tmp, "r0")], capture_output=True, text=True)
    if local.returncode != 2 or "--store" not in local.stderr or secret(0) != before:
        fail("a local rotate-secret on a replica's data dir: exit %d, %s" %
             (local.returncode, local.stderr))
    rot = subprocess.run([loomd, "token", "rotate-secret", "--data-dir", os.path.join(tmp, "r0"),
                          "--store", store, "--ha-name", "test"], capture_output=True, text=True,
                         timeout=60)
    if rot.returncode != 0 or secret(0) == before:
        fail("rotate-secret --store: exit %d, %s" % (rot.returncode, rot.stderr))
    start(1)
    wait_leader()
    procs[1].terminate()
    procs[1].wait(timeout=10)
    if secret(1) != secret(0):
        fail("replica 1, started after rotate-secret --store, holds another secret")
    print("rotate-secret --store: the new secret is in replica 1's store, rebuilt from the log")
finally:
    for w in workers:
        if w.poll() is None:
            w.kill()
    for p in procs:
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
