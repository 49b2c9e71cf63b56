#!/usr/bin/env python3
"""sim_timeline.py - audit a `loom sim --timeline` run without the simulator's meter.

Usage: sim_timeline.py TIMELINE REPORT_JSON PER_JOB_CSV

From the timeline alone it recomputes, for every policy in it:
  - the bill: every node's lifetime x its price (the cluster record's $/GPU-h x GPUs per node),
    against the report's total_cost;
  - occupancy: every phase segment lies within a lifetime of a provisioned node; no node runs
    two non-tail phases at once, or more GPUs than it has;
  - switches: a phase that takes a node from another job's state, or from the same job's other
    phase (a lone member's rollout and training on one node), waits at least the job's warm
    switch less the time the node stood idle before it;
  - each job: one completed training per iteration, 0 .. iterations - 1, its completion at the
    end of its last; its slowdown (completion - first rollout start) / solo run time and SLO
    verdict, against the per-job CSV and the report's attainment and median slowdown.
Exits 1 with the first few violations printed, 0 when everything holds.
"""
import collections
import csv
import json
import sys

PHASE_KEYS = ("job", "phase")


def load(path):
    by = collections.defaultdict(list)
    with open(path) as f:
        for n, line in enumerate(f, 1):
            r = json.loads(line)
            r["_line"] = n
            by[r["policy"]].append(r)
    return by


def pct(v, q):
    """The q-quantile of sorted v, by linear interpolation (as the simulator's sim_pct)."""
    if not v:
        return None
    x = q * (len(v) - 1)
    lo = int(x)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (x - lo)


def check_policy(pol, recs, report, per_job, errs):
    def bad(msg):
        errs.append(f"{pol}: {msg}")

    cl = next(r for r in recs if r["ev"] == "cluster")
    gpn = cl["gpus_per_node"]
    node_price = {"rollout": cl["price"][0] * gpn, "train": cl["price"][1] * gpn}
    jobs = {r["job"]: r for r in recs if r["ev"] == "job"}

    # node lifetimes
    life = collections.defaultdict(list)  # (pool, node) -> [[up, down]]
    for r in recs:
        if r["ev"] != "node":
            continue
        k = (r["pool"], r["node"])
        if r["up"]:
            if life[k] and life[k][-1][1] is None:
                bad(f"line {r['_line']}: node {k} provisioned twice")
            life[k].append([r["t"], None])
        else:
            if not life[k] or life[k][-1][1] is not None:
                bad(f"line {r['_line']}: node {k} released while not provisioned")
                continue
            life[k][-1][1] = r["t"]
    cost = 0.0
    for k, ivs in life.items():
        for up, down in ivs:
            if down is None:
                bad(f"node {k} never released")
                continue
            cost += (down - up) / 3.6e9 * node_price[k[0]]
    want = report["total_cost"]
    if abs(cost - want) > 0.006 + 1e-9 * abs(want):
        bad(f"node lifetimes x price = {cost:.4f}, the report says {want:.2f}")

    segs = [r for r in recs if r["ev"] == "phase"]
    # every segment on provisioned nodes, and per node what runs on it
    on = collections.defaultdict(list)
    for s in segs:
        for node, g in zip(s["nodes"], s["gpus"]):
            k = (s["pool"], node)
            if not any(up <= s["start"] and (down is None or s["end"] <= down) for up, down in life[k]):
                bad(f"line {s['_line']}: job {s['job']} {s['phase']} on {k} "
                    f"[{s['start']}, {s['end']}] outside the node's lifetimes")
            on[k].append((s, g))
    for k, lst in on.items():
        # GPUs and non-tail phases at once: ends before starts at the same instant
        ev = []
        for s, g in lst:
            if s["end"] > s["start"]:
                nt = 0 if s["tail"] else 1
                ev.append((s["start"], 1, g, nt, s))
                ev.append((s["end"], 0, -g, -nt, s))
        ev.sort(key=lambda e: (e[0], e[1]))
        gpus = phases = 0
        for t, kind, dg, dp, s in ev:
            gpus += dg
            phases += dp
            if kind and gpus > gpn:
                bad(f"line {s['_line']}: node {k} runs {gpus} GPUs of {gpn} at t={t}")
            if kind and phases > 1:
                bad(f"line {s['_line']}: node {k} runs two non-tail phases at t={t}")
        # switches: a phase taking the node from another state pays warm less the idle time
        firsts = sorted((s for s, _ in lst if s["start"] == s["switch"]), key=lambda s: (s["start"], s["_line"]))
        ends = sorted(s["end"] for s, _ in lst)
        prev = None
        for s in firsts:
            lt = [up for up, down in life[k] if up <= s["start"]]
            born = max(lt) if lt else 0
            if prev is not None and prev["start"] >= born and \
                    (prev["job"], prev["phase"]) != (s["job"], s["phase"]):
                before = [e for e in ends if e <= s["start"]]
                idle = s["start"] - max(before) if before else s["start"] - born
                need = jobs[s["job"]]["warm_us"] - idle
                if s["work"] - s["switch"] < need - 1:
                    bad(f"line {s['_line']}: job {s['job']} {s['phase']} takes node {k} from job "
                        f"{prev['job']} {prev['phase']} after {idle} us idle but waits only "
                        f"{s['work'] - s['switch']} us (its warm switch is {jobs[s['job']]['warm_us']} us)")
            prev = s

    # jobs: iterations, completion, slowdown, verdict
    done = {r["job"]: r["t"] for r in recs if r["ev"] == "done"}
    trains = collections.defaultdict(list)
    first = {}
    for s in segs:
        if s["phase"] == "rollout" and s["start"] == s["switch"]:
            first[s["job"]] = min(first.get(s["job"], s["switch"]), s["switch"])
        if s["phase"] == "train" and not s["lost"] and not s["tail"] and \
                (s["calls"] == 0 or s["call"] == s["calls"] - 1):
            trains[s["job"]].append(s)
    met = 0
    slow = []
    for j, jr in jobs.items():
        its = sorted(s["iter"] for s in trains[j])
        if j in done:
            if its != list(range(jr["iterations"])):
                bad(f"job {j}: completed trainings of iterations {its[:5]}... "
                    f"({len(its)}), want 0..{jr['iterations'] - 1}")
            last = max((s["end"] for s in trains[j]), default=None)
            if last != done[j]:
                bad(f"job {j}: done at {done[j]}, its last training ended at {last}")
            sd = (done[j] - first[j]) / jr["solo_us"]
            slow.append(sd)
            ok = sd <= jr["slo"] * (1 + 1e-9)
            met += ok
            row = per_job.get((pol, j))
            if row is None or abs(float(row["slowdown"]) - sd) > 1e-5 + 1e-6 * sd:
                bad(f"job {j}: slowdown {sd:.6f} from the timeline, "
                    f"{row and row['slowdown']} in the per-job file")
            elif abs(sd - jr["slo"]) > 1e-6 and (row["met"] == "1") != ok:
                bad(f"job {j}: SLO verdict {ok} from the timeline, {row['met']} in the per-job file")
        elif len(set(its)) == jr["iterations"] and jr["iterations"] > 0:
            bad(f"job {j}: every iteration trained but no completion")
    att = met / len(jobs) if jobs else 1.0
    if abs(att - report["slo_attainment"]) > 6e-5:
        bad(f"SLO attainment {att:.5f} from the timeline, {report['slo_attainment']} reported")
    slow.sort()
    p50 = pct(slow, 0.5)
    if p50 is not None and report["slowdown_p50"] is not None and abs(p50 - report["slowdown_p50"]) > 6e-5:
        bad(f"median slowdown {p50:.5f} from the timeline, {report['slowdown_p50']} reported")
    return len(segs)


def main():
    tl, rep, pj = sys.argv[1:4]
    by = load(tl)
    reports = {}
    with open(rep) as f:
        for line in f:
            r = json.loads(line)
            reports[r["policy"]] = r
    per_job = {}
    with open(pj) as f:
        index = {}
        for row in csv.DictReader(f):
            # the per-job file names jobs; the timeline numbers them in workload order
            n = index.setdefault(row["policy"], 0)
            index[row["policy"]] = n + 1
            per_job[(row["policy"], n)] = row
    errs = []
    for pol, recs in by.items():
        if pol not in reports:
            errs.append(f"{pol}: in the timeline but not in the report")
            continue
        n = check_policy(pol, recs, reports[pol], per_job, errs)
        print(f"{pol}: {n} phase segments checked")
    missing = [p for p in reports if p not in by and p not in ("lb", "oracle")]
    if missing:
        errs.append(f"no timeline for {missing}")
    if errs:
        for e in errs[:20]:
            print("FAIL:", e, file=sys.stderr)
        print(f"{len(errs)} violations", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
