#!/usr/bin/env python3
"""Synthetic serving bursts on top of the bundled Azure conversation trace, for bench/harvest.sh.

Deterministic (no randomness): the same input gives the same files. Writes two CSVs in the
trace format `loom harvest sim --trace` reads (TIMESTAMP in seconds, ContextTokens,
GeneratedTokens):

  step.csv   the trace, with its arrival rate tripled between 1200 s and 1800 s: every request
             in that window is sent three times, 0.3 s apart (a step change in load);
  spikes.csv the trace, plus a long-context spike every 120 s from 300 s on: six requests of
             7,000-8,000 prompt tokens (near the 8,192-token prefill batch) 0.4 s apart.

usage: harvest_bursts.py TRACE OUTDIR
"""
import csv
import datetime
import os
import sys


def load(path):
    rows = []
    with open(path, newline="") as f:
        r = csv.reader(f)
        next(r)
        t0 = None
        for ts, ctx, gen in r:
            t = datetime.datetime.strptime(ts[:26], "%Y-%m-%d %H:%M:%S.%f").timestamp()
            t0 = t if t0 is None else t0
            rows.append((t - t0, int(ctx), int(gen)))
    return rows


def write(path, rows):
    rows.sort(key=lambda x: x[0])
    with open(path, "w") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for t, c, g in rows:
            f.write("%.3f,%d,%d\n" % (t, c, g))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    base = load(sys.argv[1])
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    step = list(base)
    for t, c, g in base:
        if 1200 <= t < 1800:
            step += [(t + 0.3, c, g), (t + 0.6, c, g)]
    write(os.path.join(out, "step.csv"), step)
    spikes = list(base)
    end = base[-1][0]
    k = 0
    t = 300.0
    while t < end:
        for i in range(6):
            spikes.append((t + 0.4 * i, 7000 + 200 * ((k + i) % 6), 100 + 50 * i))
        k += 1
        t += 120
    write(os.path.join(out, "spikes.csv"), spikes)


main()
