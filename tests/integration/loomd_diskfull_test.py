"""loomd survives a store that refuses writes (docs/operations.md, "Storage errors").
Usage: loomd_diskfull_test.py BUILD SOURCE

Two ways to make the store refuse writes, each in its own run against a real loomd:
- full: the data dir is a 6 MiB tmpfs, filled with a file until the file system has no byte
  left: SQLite reports SQLITE_FULL. Needs root (mount); skipped with a message otherwise.
- ioerr: the file-size limit of the running loomd is lowered to 1 KiB (prlimit): every write
  past that offset fails with EFBIG, which SQLite reports as SQLITE_IOERR. An emulation of a
  failing disk that needs no privilege.

Each run: a job holds a rollout lease; the store starts refusing writes; submits are sent until
one gets 503 (on a tmpfs, a commit may still fit in space the WAL already has). Then: loomd is
alive, the 503 names the store and carries Retry-After, no 503'd submit exists, every 201'd one
does, /healthz says degraded, the metrics count the error, the held lease heartbeats and a
retried acquire returns it, while a release (a write) is refused. Writes come back (the filler
file deleted, the limit raised): loomd says so without restart, the held lease is released,
the held job runs to its iterations (the others are cancelled),
and so does a job submitted afterwards. A SIGTERM (exit 0) and restart give back the same jobs.
"""
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import check, job_spec  # noqa: E402

build = sys.argv[1]


class Daemon:
    def __init__(self, data_dir):
        self.dir = data_dir
        self.proc = None
        self.port = None
        self.log = []

    def start(self):
        pf = os.path.join(tempfile.gettempdir(), f"loomd-diskfull-port-{os.getpid()}")
        if os.path.exists(pf):
            os.unlink(pf)
        # restore_signals=False keeps SIGXFSZ ignored (as Python has it): a write past the
        # file-size limit then fails with EFBIG instead of killing loomd. stderr is a pipe, so
        # the log itself is not subject to the limit.
        self.proc = subprocess.Popen(
            [os.path.join(build, "loomd"), "--data-dir", self.dir, "--listen", "127.0.0.1:0",
             "--port-file", pf, "--lease-timeout", "60"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            restore_signals=False)
        threading.Thread(target=lambda p=self.proc: self.log.extend(p.stderr),
                         daemon=True).start()
        for _ in range(1000):
            if os.path.exists(pf):
                self.port = int(open(pf).read())
                os.unlink(pf)
                return
            if self.proc.poll() is not None:
                sys.exit(f"FAIL: loomd exited {self.proc.returncode}: {''.join(self.log)}")
            time.sleep(0.01)
        sys.exit("FAIL: loomd did not start")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def req(self, method, path, body=None):
        """(status, JSON or None, headers) of one request."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request(method, path, body=json.dumps(body) if body is not None else None)
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        try:
            return r.status, json.loads(text) if text else None, dict(r.getheaders())
        except ValueError:
            return r.status, text, dict(r.getheaders())


def fill(path):
    """Write path until the file system has no byte left."""
    with open(path, "wb", buffering=0) as f:
        for block in (1 << 20, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * block)
            except OSError:
                pass


def run_job(d, jid, lease=None):
    """Release lease (if given) and run job jid to its iterations."""
    if lease:
        st, _, _ = d.req("POST", f"/v1/leases/{lease}/release", {"status": "ok"})
        check(st == 200, f"job {jid}: the held lease {lease} is released once writes are back")
    for _ in range(20):
        st, j, _ = d.req("GET", f"/v1/jobs/{jid}")
        if j["state"] != "running" and j["state"] != "queued":
            break
        st, l, _ = d.req("POST", f"/v1/jobs/{jid}/phases/{j['next_phase']}/acquire?wait=10")
        check(st == 200, f"job {jid} acquires {j['next_phase']}")
        st, _, _ = d.req("POST", f"/v1/leases/{l['lease']}/release", {"status": "ok"})
        check(st == 200, f"job {jid} releases {j['next_phase']}")
    check(j["state"] == "finished" and j["iterations_done"] == j["iterations"],
          f"job {jid} finished with its iterations ({j['state']}, {j['iterations_done']})")


def snapshot(d):
    st, body, _ = d.req("GET", "/v1/jobs")
    check(st == 200, "jobs listed")
    return sorted((j["id"], j["name"], j["state"], j["iterations_done"],
                   json.dumps(j.get("decision", {}).get("group"))) for j in body["jobs"])


def scenario(kind, data_dir, refuse, restore):
    print(f"--- {kind}")
    d = Daemon(data_dir)
    d.start()
    st, a, _ = d.req("POST", "/v1/jobs", job_spec(f"{kind}-held", iterations=2))
    check(st == 201, "a job is accepted")
    st, held, _ = d.req("POST", f"/v1/jobs/{a['id']}/phases/rollout/acquire?wait=10")
    check(st == 200, "it holds a rollout lease")

    refuse(d)
    acked, refused, answer = [], [], None
    for i in range(400):
        name = f"{kind}-{i}"
        st, body, hdr = d.req("POST", "/v1/jobs", job_spec(name, iterations=1))
        if st == 201:
            acked.append((body["id"], name))
            continue
        check(st == 503, f"a submit the store cannot take gets 503 (got {st}: {body})")
        refused.append(name)
        answer = (body, hdr)
        break
    check(answer is not None, f"the store refused a write ({len(acked)} submits fit first)")
    body, hdr = answer
    print(f"     503: {body['error']}")
    check(body.get("field") == "store", "the 503 names the store")
    check(hdr.get("Retry-After", "").isdigit(), "the 503 carries Retry-After")
    check(d.proc.poll() is None, "loomd is still running")
    st, body, _ = d.req("POST", "/v1/jobs", job_spec(f"{kind}-again", iterations=1))
    check(st == 503, "the next submit is refused at once")
    refused.append(f"{kind}-again")
    names = {x[1] for x in snapshot(d)}
    check(all(n not in names for n in refused), "no refused submit exists")
    check(all(n in names for _, n in acked), "every acknowledged submit exists")
    st, h, _ = d.req("GET", "/healthz")
    check(st == 200 and h["status"] == "degraded" and h["store"]["writable"] is False,
          f"/healthz reports degraded storage ({h})")
    st, m, _ = d.req("GET", "/metrics")
    check("loom_store_writable 0" in m, "loom_store_writable is 0")
    errs = [int(x.split()[1]) for x in m.splitlines() if x.startswith("loom_store_errors_total")]
    check(errs and errs[0] >= 1, f"loom_store_errors_total counts it ({errs})")
    st, hb, _ = d.req("POST", f"/v1/leases/{held['lease']}/heartbeat")
    check(st == 200, "the held lease still heartbeats")
    st, again, _ = d.req("POST", f"/v1/jobs/{a['id']}/phases/rollout/acquire?wait=1")
    check(st == 200 and again["lease"] == held["lease"], "a retried acquire returns the held lease")
    st, body, _ = d.req("POST", f"/v1/leases/{held['lease']}/release", {"status": "ok"})
    check(st == 503, "a release (a write) is refused meanwhile")

    restore(d)
    for _ in range(100):
        st, h, _ = d.req("GET", "/healthz")
        if h["status"] == "ok":
            break
        time.sleep(0.1)
    check(h["status"] == "ok", "loomd takes writes again without a restart")
    for jid, _ in acked:  # out of the way of the held job's group
        st, _, _ = d.req("DELETE", f"/v1/jobs/{jid}")
        check(st == 200, f"acknowledged job {jid} is cancelled") if jid == acked[-1][0] else None
    run_job(d, a["id"], held["lease"])
    st, c, _ = d.req("POST", "/v1/jobs", job_spec(f"{kind}-after", iterations=2))
    check(st == 201, "a submit is accepted again")
    run_job(d, c["id"])
    before = snapshot(d)
    check(d.stop() == 0, "SIGTERM stops loomd with status 0")
    log = "".join(d.log)
    check("store refuses writes" in log and "takes writes again" in log,
          "the log says when writes were refused and when they came back")
    check("Sanitizer" not in log and "runtime error" not in log, "no sanitizer report")
    d = Daemon(data_dir)
    d.start()
    after = snapshot(d)
    check(after == before, f"a restart replays to the same {len(after)} jobs")
    check(d.stop() == 0, "the restarted loomd stops cleanly")


def prlimit(d, value):
    subprocess.run(["prlimit", "--pid", str(d.proc.pid), f"--fsize={value}:"], check=True)


skipped = []
if shutil.which("prlimit"):
    tmp = tempfile.mkdtemp(prefix="loomd-ioerr-")
    scenario("ioerr", tmp, lambda d: prlimit(d, 1024), lambda d: prlimit(d, "unlimited"))
    shutil.rmtree(tmp, True)
else:
    skipped.append("ioerr (no prlimit)")

mnt = tempfile.mkdtemp(prefix="loomd-full-")
mounted = os.geteuid() == 0 and subprocess.run(
    ["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", mnt], capture_output=True).returncode == 0
if mounted:
    try:
        data = os.path.join(mnt, "data")
        filler = os.path.join(mnt, "filler")
        scenario("full", data, lambda d: fill(filler), lambda d: os.unlink(filler))
    finally:
        subprocess.run(["umount", "-l", mnt])
else:
    skipped.append("full (mounting a tmpfs needs root)")
os.rmdir(mnt)
if skipped:
    print("skipped: " + ", ".join(skipped))
if len(skipped) == 2:
    sys.exit(77)
