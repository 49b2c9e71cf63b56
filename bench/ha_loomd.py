"""Replicated loomd figures (docs/ha.md), printed; nothing here fails on timing.

  cost       the same submits and permits against one loomd on SQLite and one replica on etcd,
             in one run: submit throughput, permit grant latency p50/p99, and whether every
             placement decision is identical
  failover   N kills (-9) of the leader under live jobs: from the kill to the next permit the
             new leader grants (the first phase a worker starts after it), p50/p99
  campaign   N faults drawn from leader kill -9, leader SIGSTOP past its lease, etcd member
             kill -9 (restarted after), under live jobs; then every job must have finished with
             exactly its iterations, each phase run once, and no acknowledged submit lost

argv: build, src, etcd endpoints, scratch folder, mode, N, seed, then the etcd pids.
"""
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

build, src, eps, tmp, mode = sys.argv[1:6]
count, seed = int(sys.argv[6]), int(sys.argv[7])
etcd_pids = [int(p) for p in sys.argv[8:]]
TTL = 2
# the campaign's fault kinds, drawn with these weights; LOOM_BENCH_FAULTS=etcd-kill (say) runs
# one kind alone
KINDS = os.environ.get("LOOM_BENCH_FAULTS", "leader-kill,leader-kill,leader-pause,etcd-kill") \
    .split(",")
for k in KINDS:
    if k not in ("leader-kill", "leader-pause", "etcd-kill"):
        sys.exit("LOOM_BENCH_FAULTS: unknown fault kind %r (leader-kill, leader-pause, etcd-kill)" % k)
STORE = "etcd://" + ",".join(e.replace("http://", "") for e in eps.split(","))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url, method, path, body=None, timeout=10):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
    except (urllib.error.URLError, OSError):
        return 0, None


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


class Replicas:
    def __init__(self, n, name):
        self.ports = [free_port() for _ in range(n)]
        self.urls = ["http://127.0.0.1:%d" % p for p in self.ports]
        self.procs = [None] * n
        self.name = name

    def start(self, i):
        log = open(os.path.join(tmp, "%s-r%d.log" % (self.name, i)), "ab")
        self.procs[i] = subprocess.Popen(
            [os.path.join(build, "loomd"), "--data-dir", os.path.join(tmp, "%s-r%d" % (self.name, i)),
             "--listen", "127.0.0.1:%d" % self.ports[i], "--store", STORE, "--ha-name", self.name,
             "--ha-ttl", str(TTL), "--insecure-loopback"] + ([] if os.environ.get("LOOM_BENCH_KEEP") else ["--quiet"]), stderr=log, stdout=log)

    def leader(self):
        for i, u in enumerate(self.urls):
            p = self.procs[i]
            if p is None or p.poll() is not None:
                continue
            st, h = call(u, "GET", "/healthz", timeout=1)
            if st == 200 and h.get("role") == "leader":
                return i
        return None

    def wait_leader(self, timeout=30):
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            i = self.leader()
            if i is not None:
                return i
            time.sleep(0.02)
        sys.exit("no replica leads after %d s" % timeout)

    def revive(self):
        """Start again every replica that exited, as systemd's Restart=always would; returns
        the exit statuses that were not a step-down (4)."""
        odd = []
        for i, p in enumerate(self.procs):
            if p is not None and p.poll() is not None:
                if p.returncode != 4:
                    odd.append(p.returncode)
                self.start(i)
        return odd

    def stop(self):
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()


def spec(k, iters):
    return {"name": "j%d" % k, "rollout_gpus": 8 * (1 + k % 2), "train_gpus": 8,
            "t_roll_s": 40 + 7 * (k % 5), "t_train_s": 20 + 3 * (k % 4), "iterations": iters,
            "slo": 1.5 + 0.25 * (k % 3)}


def submit_all(url, n, iters, key):
    ids = []
    for k in range(n):
        body = json.dumps(spec(k, iters)).encode()
        while True:
            req = urllib.request.Request(url() + "/v1/jobs", data=body, method="POST")
            req.add_header("Idempotency-Key", "%s-%d" % (key, k))
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    ids.append(json.loads(r.read())["id"])
                    break
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
    return ids


def workers_for(urls, ids, phase_s):
    env = dict(os.environ, LOOM_URL=",".join(urls), LOOM_GRACE_S="120")
    ws = []
    for j in ids:
        for ph in ("rollout", "train"):
            out = open(os.path.join(tmp, "w%d-%s.out" % (j, ph)), "wb")
            ws.append(subprocess.Popen(
                [sys.executable, os.path.join(src, "src/exec/loom-worker"), str(phase_s)],
                env=dict(env, LOOM_JOB=str(j), LOOM_PHASE=ph), stdout=out,
                stderr=subprocess.STDOUT))
    return ws


def iteration_times():
    ts = []
    for f in os.listdir(tmp):
        if f.startswith("w") and f.endswith(".out"):
            for line in open(os.path.join(tmp, f)):
                m = re.match(r"([0-9.]+) job \d+ \w+ rank 0 iteration", line)
                if m:
                    ts.append(float(m.group(1)))
    return sorted(ts)


def mode_cost():
    n = count
    # one loomd on SQLite, one replica on etcd, the same inputs
    port = free_port()
    log = open(os.path.join(tmp, "sqlite.log"), "ab")
    single = subprocess.Popen(
        [os.path.join(build, "loomd"), "--data-dir", os.path.join(tmp, "single"), "--listen",
         "127.0.0.1:%d" % port, "--insecure-loopback", "--quiet"], stderr=log, stdout=log)
    rep = Replicas(1, "cost")
    rep.start(0)
    rep.wait_leader()
    su = "http://127.0.0.1:%d" % port
    for _ in range(100):
        if call(su, "GET", "/healthz")[0] == 200:
            break
        time.sleep(0.05)
    res = {}
    for name, url in (("sqlite", su), ("etcd", rep.urls[0])):
        t0 = time.monotonic()
        ids = submit_all(lambda u=url: u, n, 1000, name)
        took = time.monotonic() - t0
        decisions = []
        for j in ids:
            st, x = call(url, "GET", "/v1/jobs/%d" % j)
            decisions.append((x["decision"]["decision"], x["group"], x["rollout_nodes"],
                              x["train_nodes"], x["rate"]))
        # grants: the jobs above cancelled, one job alone, its phases back to back
        for j in ids:
            call(url, "DELETE", "/v1/jobs/%d" % j)
        st, x = call(url, "POST", "/v1/jobs", dict(spec(0, 100000), name="grants"))
        lat = []
        for _ in range(100):
            for ph in ("rollout", "train"):
                a = time.monotonic()
                st, l = call(url, "POST", "/v1/jobs/%d/phases/%s/acquire?wait=5" % (x["id"], ph))
                lat.append(time.monotonic() - a)
                if st != 200:
                    sys.exit("%s: acquire answered %d %s" % (name, st, l))
                call(url, "POST", "/v1/leases/%d/release" % l["lease"], {"status": "ok"})
        res[name] = (n / took, pct(lat, 50), pct(lat, 99), decisions)
    single.terminate()
    single.wait()
    rep.stop()
    print("store   submits/s  grant p50 ms  grant p99 ms   (%d jobs, %d grants)" %
          (n, len(lat)))
    for name in ("sqlite", "etcd"):
        r = res[name]
        print("%-7s %9.1f  %12.2f  %12.2f" % (name, r[0], r[1] * 1e3, r[2] * 1e3))
    same = res["sqlite"][3] == res["etcd"][3]
    print("placement decisions identical for the same inputs: %s (%d jobs)" %
          ("yes" if same else "NO", n))
    return 0 if same else 1


def mode_failover(campaign):
    rng = random.Random(seed)
    reps = Replicas(3, "fo")
    for i in range(3):
        reps.start(i)
        time.sleep(0.3)
    lead = reps.wait_leader()
    # failover: four endless jobs; campaign: four jobs live at any time, each of ITERS
    # iterations, a new one submitted whenever one finishes
    njobs, iters = 4, 100000 if not campaign else 120
    ids = submit_all(lambda: reps.urls[reps.wait_leader()], njobs, iters, "fo")
    ws = workers_for(reps.urls, ids, 0.02)
    submitted = [njobs]

    def top_up():
        i = reps.leader()
        st, j = call(reps.urls[i], "GET", "/v1/jobs?state=live&limit=1000") \
            if i is not None else (0, None)
        if st != 200:
            return
        live = len(j["jobs"])
        for _ in range(njobs - live):
            k = submitted[0]
            submitted[0] += 1
            new = submit_all(lambda: reps.urls[reps.wait_leader()], k + 1, iters, "fo")[k:]
            ids.extend(new)
            ws.extend(workers_for(reps.urls, new, 0.02))
    time.sleep(2)
    took, kinds, odd_exits = [], {}, []
    etcd_down = None
    for k in range(count):
        kind = "leader-kill" if not campaign else rng.choice(KINDS)
        if kind == "etcd-kill" and etcd_down is not None:
            kind = "leader-kill"
        lead = reps.wait_leader()
        if kind == "leader-kill":
            t0 = time.time()
            reps.procs[lead].kill()
            reps.procs[lead].wait()
        elif kind == "leader-pause":
            t0 = time.time()
            reps.procs[lead].send_signal(signal.SIGSTOP)
        else:
            m = rng.randrange(3)
            os.kill(etcd_pids[m], signal.SIGKILL)
            etcd_down = m
            t0 = time.time()
        kinds[kind] = kinds.get(kind, 0) + 1
        if os.environ.get("LOOM_BENCH_VERBOSE"):
            print("  fault %d %s at %.3f" % (k + 1, kind, t0), flush=True)
        # the next permit granted after the fault
        deadline = time.time() + 60
        first = None
        while time.time() < deadline and first is None:
            time.sleep(0.05)
            # a reply the old leader sent just before it died is printed within 100 ms
            after = [t for t in iteration_times() if t > t0 + 0.1]
            first = after[0] if after else None
        if first is None:
            for f in sorted(os.listdir(tmp)):
                if f.endswith(".log") or f.endswith(".out"):
                    print("--- %s\n%s" % (f, open(os.path.join(tmp, f)).read()[-1500:]))
            sys.exit("fault %d (%s): no permit granted within 60 s" % (k + 1, kind))
        if kind == "leader-kill":
            took.append(first - t0)
            reps.start(lead)
        elif kind == "leader-pause":
            time.sleep(TTL + 0.5)
            reps.procs[lead].send_signal(signal.SIGCONT)
            try:
                rc = reps.procs[lead].wait(timeout=15)
            except subprocess.TimeoutExpired:
                sys.exit("a paused leader, woken after its lease, kept running")
            if rc != 4:
                sys.exit("a paused leader, woken after its lease, exited %d, not 4" % rc)
            reps.start(lead)
        if etcd_down is not None and (kind != "etcd-kill" or rng.random() < 0.5):
            etcd_pids[etcd_down] = restart_etcd(etcd_down)
            etcd_down = None
        time.sleep(0.8 + rng.random() * 0.5)  # the restarted replica follows again
        odd_exits.extend(reps.revive())  # stepped down during etcd's own election
        if campaign:
            top_up()
        if not campaign and (k + 1) % 10 == 0:
            print("  %d kills: p50 %.2f s, p99 %.2f s" % (k + 1, pct(took, 50), pct(took, 99)),
                  flush=True)
    if not campaign:
        print("failover (leader kill -9 to the next permit), %d kills, lease %d s: "
              "p50 %.2f s, p99 %.2f s, max %.2f s" %
              (len(took), TTL, pct(took, 50), pct(took, 99), max(took)))
        for w in ws:
            w.kill()
        reps.stop()
        return 0
    # let the jobs finish: every job with exactly its iterations, each phase run once
    if etcd_down is not None:
        etcd_pids[etcd_down] = restart_etcd(etcd_down)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 600:
        i = reps.leader()
        st, j = call(reps.urls[i], "GET", "/v1/jobs?state=live") if i is not None else (0, None)
        if st == 200 and not j["jobs"]:
            break
        time.sleep(0.5)
    # every job, page by page (a page is 100 jobs by default)
    jobs, after = [], None
    while True:
        i = reps.leader()
        st, page = call(reps.urls[i], "GET", "/v1/jobs?limit=1000" +
                        ("&after=%d" % after if after else "")) if i is not None else (0, None)
        if st != 200:
            time.sleep(0.5)
            continue
        jobs += page["jobs"]
        after = page.get("next")
        if not after:
            break
    j = {"jobs": jobs}
    bad = [x for x in j["jobs"] if x["state"] != "finished" or x["iterations_done"] != iters]
    twice = 0
    for jid in ids:
        for ph in ("rollout", "train"):
            its = [int(m) for m in re.findall(r" iteration (\d+)",
                                              open(os.path.join(tmp, "w%d-%s.out" % (jid, ph))).read())]
            twice += len(its) - len(set(its))
            if len(its) != len(set(its)) and os.environ.get("LOOM_BENCH_VERBOSE"):
                text = open(os.path.join(tmp, "w%d-%s.out" % (jid, ph))).read()
                for k in sorted({k for k in its if its.count(k) > 1}):
                    print("  job %d %s iteration %d at %s" % (jid, ph, k, re.findall(
                        r"([0-9.]+) job \d+ \w+ rank 0 iteration %d " % k, text)))
    lost = len(set(ids) - {x["id"] for x in j["jobs"]})
    print("fault campaign: %d faults (%s); jobs %d, finished with exactly their iterations %d, "
          "phases run again after a takeover %d, acknowledged submits lost %d, replicas that "
          "exited other than by stepping down %d" %
          (count, ", ".join("%s %d" % kv for kv in sorted(kinds.items())), len(ids),
           len(ids) - len(bad), twice, lost, len(odd_exits)))
    for w in ws:
        w.kill()
    reps.stop()
    return 0 if not bad and not lost and not odd_exits else 1


def restart_etcd(m):
    """Start member m again (same data dir, the existing cluster) and wait until it answers."""
    for _ in range(3):
        pid = start_etcd(m)
        ep = eps.split(",")[m]
        for _ in range(50):
            if subprocess.run(["etcdctl", "--endpoints", ep, "--command-timeout=1s",
                               "endpoint", "health"], capture_output=True,
                              env=dict(os.environ, ETCDCTL_API="3")).returncode == 0:
                return pid
            time.sleep(0.2)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        time.sleep(1)
    sys.exit("etcd member %d does not come back" % (m + 1))


def start_etcd(m):
    base = int(eps.split(",")[0].rsplit(":", 1)[1]) - 1
    cl = ",".join("e%d=http://127.0.0.1:%d" % (i, base + 10 + i) for i in (1, 2, 3))
    i = m + 1
    log = open(os.path.join(tmp, "e%d.log" % i), "ab")
    p = subprocess.Popen(
        ["etcd", "--name", "e%d" % i, "--data-dir", os.path.join(tmp, "e%d" % i),
         "--listen-client-urls", "http://127.0.0.1:%d" % (base + i),
         "--advertise-client-urls", "http://127.0.0.1:%d" % (base + i),
         "--listen-peer-urls", "http://127.0.0.1:%d" % (base + 10 + i),
         "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % (base + 10 + i),
         "--initial-cluster", cl, "--initial-cluster-state", "existing"],
        stdout=log, stderr=log)
    return p.pid


if __name__ == "__main__":
    if mode == "cost":
        sys.exit(mode_cost())
    sys.exit(mode_failover(mode == "campaign"))
