"""Sim-to-real: a window of jobs through loomd's Slurm executor on the local cluster and through
`loom sim`, compared by provisioned node-seconds and dollars (docs/sim.md, "Against a real
engine"). Run by bench/sim2slurm.sh, which documents the options.

Time is scaled: 1 simulated minute = 1 s. The trace is written in scaled seconds and given to
`loom sim` as it is, so the simulator's hours are the bench's hours; dollars are printed at the
simulated scale (a node-second here is a node-minute of the simulated cluster).

Three figures per policy and pool:
  (a) Slurm: slurmctld's own power records: every call it makes to the cluster's ResumeProgram
      and SuspendProgram (log/power.log of slurm-cluster.sh): a node is provisioned from the call
      that powers it up to the call that powers it down (a cloud bills an instance from its
      launch to its stop).
      jobcomp/filetxt (log/jobcomp.txt) gives the colocated jobs' run times beside it.
  (b) loomd: GET /v1/cluster's nodes per pool, sampled every 0.1 s and integrated (loom only;
      for colocated the bench itself provisions, and (b) is the bench's own book of power ups).
  (c) `loom sim --policy loom,colocated --sleep-phases --deterministic --boot-s B` on the same
      trace: node up/down records of its --timeline.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER = os.path.join(SRC, "scripts", "slurm-cluster.sh")
PRICE = {"rollout": 8 * 1.85, "train": 8 * 5.28}  # $/node-h, loom's default cluster (h20-h800)
POOLS = ("rollout", "train")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def trace(path, n, seed, gap):
    """n jobs, one 8-GPU node per pool; exponential gaps of mean `gap` s; phases 2-6 s rollout,
    1-4 s training (2-6 and 1-4 simulated minutes); 3-6 iterations; SLO 1-2."""
    r = random.Random(seed)
    t, rows = 0.0, []
    for j in range(n):
        if j:
            t += r.expovariate(1 / gap)
        tr, tt = round(r.uniform(2, 6), 1), round(r.uniform(1, 4), 1)
        it, slo = r.randint(3, 6), round(r.uniform(1, 2), 2)
        rows.append(dict(job_id=f"s{j}", arrival_s=round(t, 1), duration_s=round(it * (tr + tt), 1),
                         gpus=8, t_roll_s=tr, t_train_s=tt, iterations=it, slo=slo))
    with open(path, "w") as f:
        f.write(",".join(rows[0]) + "\n")
        for row in rows:
            f.write(",".join(str(v) for v in row.values()) + "\n")
    return rows


def sh(*cmd, timeout=15):
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout).stdout


def states():
    return dict(ln.split("|") for ln in sh("sinfo", "-h", "-N", "-o", "%N|%T").splitlines())


def wait(cond, what, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting: {what}")


def free_base():
    # below the ephemeral range (32768-60999 on Linux): a client socket that happens to take a
    # node's port would keep its slurmd from starting (a failed boot)
    for base in range(21000, 32000, 50):
        try:
            for p in range(base, base + 30):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
    raise SystemExit("sim2slurm: no free ports")


# ---- Slurm's records ----------------------------------------------------------------------------
def power_events(cdir):
    """(epoch, "resume"|"suspend", node) of slurmctld's power changes, in time order: its calls
    to the ResumeProgram and SuspendProgram (log/power.log of slurm-cluster.sh), and a node it
    gave up on at ResumeTimeout ("not resumed by ResumeTimeout - marking down and power_save" in
    slurmctld.log: powered down without a SuspendProgram call)."""
    ev = []
    for line in open(os.path.join(cdir, "log", "power.log")):
        ts, what, nodes = line.split()
        ev += [(float(ts), what, n) for n in sh("scontrol", "show", "hostnames", nodes).split()]
    gave_up = re.compile(r"^\[(\S+)\] node (\S+) not resumed by ResumeTimeout")
    for line in open(os.path.join(cdir, "log", "slurmctld.log"), errors="replace"):
        m = gave_up.match(line)
        if m:
            ev.append((datetime.fromisoformat(m.group(1)).timestamp(), "suspend", m.group(2)))
    return sorted(ev)


def power_intervals(cdir, t0, t1):
    """{pool: node-seconds} of nodes powered up to down within [t0, t1] (power_events), and
    the count of power ups per pool."""
    up, secs, wakes = {}, {p: 0.0 for p in POOLS}, {p: 0 for p in POOLS}
    for ts, what, n in power_events(cdir):
        if ts < t0 or ts > t1:
            continue
        pool = "rollout" if re.search(r"r\d+$", n) else "train"
        if what == "resume":
            up[n] = ts
            wakes[pool] += 1
        elif n in up:
            secs[pool] += ts - up.pop(n)
    for n, ts in up.items():  # still up at the end of the window
        secs["rollout" if re.search(r"r\d+$", n) else "train"] += t1 - ts
    return secs, wakes


def jobcomp(path, prefix):
    """Run seconds of the finished jobs whose name starts with prefix (jobcomp/filetxt)."""
    total, n = 0.0, 0
    if not os.path.exists(path):
        return 0.0, 0
    for line in open(path):
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if f.get("Name", "").startswith(prefix) and f.get("JobState") == "COMPLETED":
            t = [datetime.fromisoformat(f[k]).timestamp() for k in ("StartTime", "EndTime")]
            total += t[1] - t[0]
            n += 1
    return total, n


# ---- loom through loomd -------------------------------------------------------------------------
def req(url, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(url + path, data=data, method=method,
                               headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(r, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def run_loom(a, rows, d, cdir, port):
    phases = os.path.join(d, "phases.txt")
    with open(phases, "w") as f:
        for r in rows:
            f.write(f"{r['job_id']} {r['t_roll_s']} {r['t_train_s']}\n")
    worker = os.path.join(d, "worker.sh")
    with open(worker, "w") as f:  # each worker sleeps its own job's phase time
        f.write("#!/bin/sh\nt=$(awk -v n=\"$LOOM_JOB_NAME\" -v p=\"$LOOM_PHASE\" "
                "'$1 == n { print (p == \"rollout\") ? $2 : $3 }' " + phases + ")\n"
                f"exec {a.build}/loom-worker \"$t\"\n")
    os.chmod(worker, 0o755)
    nodes = os.path.join(d, "nodes.json")
    names = states()
    with open(nodes, "w") as f:
        pick = {p: ("r" if p == "rollout" else "t") + r"\d+$" for p in POOLS}
        json.dump({p: {"partition": p, "nodes": sorted(n for n in names if re.search(pick[p], n))}
                   for p in POOLS}, f)
    os.makedirs(os.path.join(d, "loomd"))
    os.makedirs(os.path.join(d, "out"))
    lerr = open(os.path.join(d, "loomd", "loomd.stderr"), "w")
    proc = subprocess.Popen([os.path.join(a.build, "loomd"), "--data-dir", os.path.join(d, "loomd"),
                             "--listen", f"127.0.0.1:{port}", "--executor", "slurm",
                             "--exec-nodes", nodes, "--worker", f"exec {worker}",
                             "--exec-dir", os.path.join(d, "out")],
                            stdout=subprocess.DEVNULL, stderr=lerr)
    url = f"http://127.0.0.1:{port}"
    try:
        wait(lambda: req_ok(url) or proc.poll() is not None, "loomd answers", 20)
        if proc.poll() is not None:
            raise SystemExit(f"sim2slurm: loomd exited {proc.returncode} (see {lerr.name})")
        wait(lambda: all(s.endswith("~") for s in states().values()),
             "loomd powers the unused nodes down (idle~)", 60)
        log(f"loom: {len(rows)} jobs through loomd --executor slurm")
        t0 = time.time()
        acct = {p: 0.0 for p in POOLS}
        ids, k, last = {}, 0, t0
        done = False
        while not done:
            now = time.time()
            while k < len(rows) and now - t0 >= rows[k]["arrival_s"]:
                r = rows[k]
                st, j = req(url, "POST", "/v1/jobs", {
                    "name": r["job_id"], "rollout_gpus": 8, "train_gpus": 8,
                    "t_roll_s": r["t_roll_s"], "t_train_s": r["t_train_s"], "slo": r["slo"],
                    "iterations": r["iterations"]})
                if st != 201:
                    raise SystemExit(f"sim2slurm: submit of {r['job_id']} refused: {st} {j}")
                ids[r["job_id"]] = j["id"]
                k += 1
            st, c = req(url, "GET", "/v1/cluster")
            now = time.time()
            for p in POOLS:
                acct[p] += c["nodes"][p] * (now - last)
            last = now
            if k == len(rows) and c["jobs"] == 0 and not any(c["nodes"].values()):
                done = True
            time.sleep(0.1)
        t1 = time.time()
        jobs = [req(url, "GET", f"/v1/jobs/{i}")[1] for i in ids.values()]
        restarts = sum(j.get("restarts", 0) for j in jobs)
        notdone = [j["name"] for j in jobs if j["state"] != "finished"]
        # let the last power downs reach slurmctld's log
        wait(lambda: all(s.endswith("~") for s in states().values()), "nodes powered down", 60)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    log(f"loom: done in {t1 - t0:.1f} s, restarts {restarts}, not finished {notdone}")
    return t0, t1 + 1.0, acct, {"restarts": restarts, "not_finished": notdone}


def measured_launch(d):
    """From the run's own records: for each job that got a group of its own (loomd's log,
    "accepted: new_group"), its acceptance to its first rollout (the rollout worker's
    "iteration 1" line); the median, in seconds. What `loom sim` models as --boot-s plus
    --launch-s."""
    acc, took = {}, []
    for line in open(os.path.join(d, "loomd", "loomd.stderr")):
        m = re.match(r"(\d+):(\d+):([\d.]+) loomd: job (\d+) \(.*\) accepted: new_group", line)
        if m:
            acc[int(m.group(4))] = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
    for j, t in acc.items():
        f = os.path.join(d, "out", f"loom-j{j}-a{j}-rollout-0.out")
        if not os.path.exists(f):
            continue
        for line in open(f):
            m = re.match(r"([\d.]+) job \d+ rollout rank 0 iteration 1 ", line)
            if m:
                w = datetime.utcfromtimestamp(float(m.group(1)))
                took.append((w.hour * 3600 + w.minute * 60 + w.second + w.microsecond / 1e6 - t)
                            % 86400)
                break
    took.sort()
    return took[len(took) // 2] if took else None


def req_ok(url):
    try:
        return req(url, "GET", "/v1/cluster")[0] == 200
    except OSError:
        return False


# ---- colocated through the same Slurm -----------------------------------------------------------
def run_colocated(a, rows):
    """Each job on one training node of its own, its phases back to back in one batch job
    (rollout on the training GPUs, --colocated-factor 1.0); the bench provisions: a node is
    powered up at the job's arrival, the job submitted once it is up, powered down at its end."""
    train = sorted(n for n in states() if re.search(r"t\d+$", n))
    lock = threading.Lock()
    busy = set()
    book = {"train": 0.0}
    errs = []

    def take():
        with lock:
            n = next((x for x in train if x not in busy and states()[x] == "idle~"), None)
            if n is None:
                raise RuntimeError("no powered-down training node free")
            busy.add(n)
        sh("scontrol", "update", f"nodename={n}", "state=power_up")
        return n

    def one(r):
        try:
            up = time.time()
            for _ in range(3):  # a node that does not come up is given up on: another one
                n = take()
                try:
                    wait(lambda: states()[n] in ("idle", "mixed", "allocated"), f"{n} up",
                         a.boot_s + 30)
                    break
                except TimeoutError:
                    log(f"colocated: {n} did not come up for {r['job_id']}; another node")
            else:
                raise RuntimeError("three nodes did not come up")
            secs = r["iterations"] * (r["t_roll_s"] + r["t_train_s"])
            jid = sh("sbatch", "--parsable", f"--job-name=coloc-{r['job_id']}", "-p", "train",
                     f"--nodelist={n}", "--exclusive", "--no-requeue", "-o", "/dev/null",
                     f"--wrap=exec sleep {secs}").strip()
            wait(lambda: not sh("squeue", "-h", "-j", jid, "-t",
                                "pending,configuring,running,completing", "-o", "%i").strip(),
                 f"colocated job {r['job_id']} ends", secs + 120)
            sh("scontrol", "update", f"nodename={n}", "state=power_down")
            down = time.time()
            with lock:
                book["train"] += down - up
            wait(lambda: states()[n].endswith("~"), f"{n} powered down", 60)
            with lock:
                busy.discard(n)
        except BaseException as e:  # noqa: BLE001 - reported below
            errs.append(f"{r['job_id']}: {e}")

    log(f"colocated: {len(rows)} jobs, one training node each, through the same Slurm")
    t0 = time.time()
    ths = []
    for r in rows:
        time.sleep(max(0.0, t0 + r["arrival_s"] - time.time()))
        th = threading.Thread(target=one, args=(r,))
        th.start()
        ths.append(th)
    for th in ths:
        th.join()
    t1 = time.time()
    if errs:
        raise SystemExit("sim2slurm: colocated: " + "; ".join(errs))
    log(f"colocated: done in {t1 - t0:.1f} s")
    return t0, t1 + 1.0, {"rollout": 0.0, **book}


# ---- the simulator ------------------------------------------------------------------------------
def run_sim(a, tpath, n, boot=None, launch=None, tl=None):
    boot = a.sim_boot_s if boot is None else boot
    launch = a.sim_launch_s if launch is None else launch
    tl = tl or tpath + ".timeline.jsonl"
    cmd = [os.path.join(a.build, "loom"), "sim", "--trace", tpath, "--rows", f"0:{n}",
           "--policy", "loom,colocated", "--sleep-phases", "--deterministic", "--json",
           "--timeline", tl, "--no-progress"]
    if boot:
        cmd += ["--boot-s", f"{boot:g}"]
    if launch:
        cmd += ["--launch-s", f"{launch:g}"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"sim2slurm: loom sim failed: {p.stderr}")
    rep = {o["policy"]: o for o in map(json.loads, p.stdout.splitlines())}
    secs = {pol: {q: 0.0 for q in POOLS} for pol in rep}
    up = {}
    for o in map(json.loads, open(tl)):
        if o.get("ev") != "node":
            continue
        key = (o["policy"], o["pool"], o["node"])
        pool = POOLS[o["pool"]] if isinstance(o["pool"], int) else o["pool"]
        if o["up"]:
            up[key] = o["t"]
        else:
            secs[o["policy"]][pool] += (o["t"] - up.pop(key)) / 1e6
    return secs, rep, " ".join(cmd[1:])


BAND_S = 0.2  # how far sim_band moves the simulator's boot and launch times


def sim_band(a, tpath, n):
    """The simulator again with its boot and launch times each moved by up to BAND_S (five
    values each): how far its rows move with sub-second timing, against which the real rows
    are read. Returns {policy: {pool or "$": (min, max)}, "ratio": {"ratio": (min, max)}}."""
    band = {}
    tl = tpath + ".band.jsonl"
    for db in (-BAND_S, -BAND_S / 2, 0.0, BAND_S / 2, BAND_S):
        for dl in (-BAND_S, -BAND_S / 2, 0.0, BAND_S / 2, BAND_S):
            secs, _, _ = run_sim(a, tpath, n, max(a.sim_boot_s + db, 0.0),
                                 max(a.sim_launch_s + dl, 0.0), tl)
            r = dollars(secs["colocated"]) / dollars(secs["loom"])
            for pol, s in list(secs.items()) + [("ratio", None)]:
                for k, v in list(s.items()) + [("$", dollars(s))] if s else [("ratio", r)]:
                    lo, hi = band.setdefault(pol, {}).get(k, (v, v))
                    band[pol][k] = (min(lo, v), max(hi, v))
    os.unlink(tl)
    return band


def dollars(s):
    # node-seconds of the scaled run = node-minutes of the simulated cluster
    return sum(s[p] / 60.0 * PRICE[p] for p in POOLS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--jobs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gap-s", type=float, default=8.0, help="mean gap between arrivals")
    ap.add_argument("--boot-s", type=int, default=4, help="the local cluster's boot time")
    ap.add_argument("--sim-boot-s", type=float, default=5.3,
                    help="loom sim --boot-s: a node's provisioning overhead, as Slurm's records "
                    "measure it for colocated jobs on the local cluster with --boot-s 4 "
                    "(docs/sim.md)")
    ap.add_argument("--sim-launch-s", type=float, default=0.9,
                    help="loom sim --launch-s: the executor's start of a worker once its node "
                    "is up, as loomd's log measures it (docs/sim.md)")
    ap.add_argument("--rollout-nodes", type=int, default=8)
    ap.add_argument("--train-nodes", type=int, default=10)
    ap.add_argument("--only-sim", action="store_true", help="the simulator's column only")
    ap.add_argument("--keep", action="store_true", help="keep the run's directory")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # tear the cluster down (finally)
    a.build = os.path.abspath(a.build)
    d = tempfile.mkdtemp(prefix="loom-sim2slurm-")
    tpath = os.path.join(d, "trace.csv")
    rows = trace(tpath, a.jobs, a.seed, a.gap_s)
    sim, rep, simcmd = run_sim(a, tpath, a.jobs)
    band = sim_band(a, tpath, a.jobs)
    res = {"sim": sim, "sim_band": band}
    if not a.only_sim:
        cdir = os.path.join(d, "cluster")
        base = free_base()
        os.environ["SLURM_CONF"] = os.path.join(cdir, "slurm.conf")
        up = subprocess.run(["bash", CLUSTER, "up", cdir, str(base), str(a.rollout_nodes),
                             str(a.train_nodes), "--boot-s", str(a.boot_s)],
                            capture_output=True, text=True, timeout=120)
        if up.returncode:
            raise SystemExit("sim2slurm: the local Slurm cluster did not start: " + up.stderr)
        try:
            t0, t1, acct, info = run_loom(a, rows, d, cdir, base + 29)
            slurm_loom, wakes_loom = power_intervals(cdir, t0, t1)
            c0, c1, book = run_colocated(a, rows)
            slurm_col, wakes_col = power_intervals(cdir, c0, c1)
            ran, njobs = jobcomp(os.path.join(cdir, "log", "jobcomp.txt"), "coloc-")
        finally:
            subprocess.run(["bash", CLUSTER, "down", cdir], capture_output=True, timeout=120)
        first = measured_launch(d)
        if first is not None:  # the simulator again, with the launch this run measured
            launch = round(max(first - a.sim_boot_s, 0.0), 2)
            sim_m, _, _ = run_sim(a, tpath, a.jobs, launch=launch,
                                  tl=tpath + ".measured.jsonl")
            res.update(first_phase_s=first, launch_measured=launch, sim_measured=sim_m)
        res.update(slurm_loom=slurm_loom, loomd=acct, slurm_col=slurm_col, book_col=book,
                   info=info, wakes_loom=wakes_loom, wakes_col=wakes_col,
                   coloc_run_s=ran, coloc_jobs=njobs)
    print(f"sim2slurm: {a.jobs} jobs (seed {a.seed}, mean gap {a.gap_s} s), 1 simulated minute "
          f"= 1 s, cluster boot {a.boot_s} s; sim: loom {simcmd}")
    print(f"{'':22}{'rollout node-s':>15}{'train node-s':>14}{'$ (sim scale)':>14}{'vs sim':>8}")

    def spread(name, b, real):
        """(c)'s range with boot and launch moved by up to BAND_S; where (a) falls in it."""
        cells = [f"{b[k][0]:.0f}-{b[k][1]:.0f}" for k in ("rollout", "train")] + \
                [f"{b['$'][0]:.0f}-{b['$'][1]:.0f}"]
        print(f"{name + ' (c) +-%gs' % BAND_S:22}{cells[0]:>15}{cells[1]:>14}{cells[2]:>14}")
        if real:
            out = []
            for k, v in (("rollout", real["rollout"]), ("train", real["train"]),
                         ("$", dollars(real))):
                lo, hi = b[k]
                off = 0.0 if lo <= v <= hi else (v / hi - 1 if v > hi else v / lo - 1)
                out.append(f"{k} {'inside' if not off else f'{off:+.1%} outside'}")
            print(f"{'':22}(a) against that range: {', '.join(out)}")

    def line(name, s, ref):
        dv = dollars(s)
        rel = f"{dv / dollars(ref) - 1:+.1%}" if dollars(ref) else ""
        print(f"{name:22}{s['rollout']:>15.1f}{s['train']:>14.1f}{dv:>14.2f}{rel:>8}")

    if "slurm_loom" in res:
        line("loom (a) Slurm", res["slurm_loom"], sim["loom"])
        line("loom (b) loomd", res["loomd"], sim["loom"])
    line("loom (c) loom sim", sim["loom"], sim["loom"])
    spread("loom", band["loom"], res.get("slurm_loom"))
    if "sim_measured" in res:
        line("loom (c') launch %.2fs" % res["launch_measured"], res["sim_measured"]["loom"],
             sim["loom"])
    if "slurm_col" in res:
        line("colocated (a) Slurm", res["slurm_col"], sim["colocated"])
        line("colocated (b) bench", res["book_col"], sim["colocated"])
    line("colocated (c) loom sim", sim["colocated"], sim["colocated"])
    spread("colocated", band["colocated"], res.get("slurm_col"))
    rs = dollars(sim["colocated"]) / dollars(sim["loom"])
    lo, hi = band["ratio"]["ratio"]
    print(f"colocated / loom: sim {rs:.3f} ({lo:.3f}-{hi:.3f} +-{BAND_S:g}s)", end="")
    if "slurm_loom" in res:
        rr = dollars(res["slurm_col"]) / dollars(res["slurm_loom"])
        print(f", Slurm {rr:.3f} ({rr / rs - 1:+.1%})")
        print(f"colocated: provisioning overhead per job by Slurm's records (power up to down "
              f"less jobcomp's run time) {(res['slurm_col']['train'] - ran) / max(njobs, 1):.2f} s "
              f"(loom sim --boot-s {a.sim_boot_s})")
        if "first_phase_s" in res:
            print(f"loom: a new group's acceptance to its first rollout, median by loomd's log "
                  f"and the workers' lines {res['first_phase_s']:.2f} s: --launch-s "
                  f"{res['launch_measured']:.2f} after --boot-s {a.sim_boot_s} (row c'; "
                  f"colocated/loom there "
                  f"{dollars(res['sim_measured']['colocated']) / dollars(res['sim_measured']['loom']):.3f})")
        print(f"loom: restarts {res['info']['restarts']}, not finished "
              f"{res['info']['not_finished'] or 'none'}; power ups {res['wakes_loom']}; "
              f"colocated: {res['coloc_jobs']} jobs ran {res['coloc_run_s']:.1f} s by jobcomp, "
              f"power ups {res['wakes_col']}")
    else:
        print()
    print("json " + json.dumps({k: v for k, v in res.items()}, default=str))
    if a.keep:
        log(f"kept {d}")
    else:
        shutil.rmtree(d, True)


if __name__ == "__main__":
    main()
