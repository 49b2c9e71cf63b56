#!/usr/bin/env bash
# sim.sh - simulator speed and the reproductions it is documented with (docs/sim.md).
# Prints numbers; never fails on timing. Usage: sim.sh BUILD_DIR (run from the source tree).
set -euo pipefail
loom="$(cd "${1:-build}" && pwd)/loom"
cd "$(dirname "$0")/.."
now() { date +%s.%N; }

echo "-- one 300-job replay of the Philly window (traces/philly/103959.csv rows 165:300)"
t0=$(now)
"$loom" sim --policy loom,loom-nomig,solo,colocated,random,greedy,lb --json --no-progress >/tmp/loom-bench-sim.$$
t1=$(now)
python3 - /tmp/loom-bench-sim.$$ "$t0" "$t1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
wall = float(sys.argv[3]) - float(sys.argv[2])
ev = sum(r["events"] for r in rows)
run = sum(r["wall_s"] for r in rows if r["events"])
print(f"all policies but oracle: {wall:.3f} s wall for the whole command (target < 1 s)")
print(f"events: {ev} in {run:.3f} s of policy run time = {ev / run / 1e6:.2f} M events/s (target >= 1 M/s)")
for r in rows:
    print(f"  {r['policy']:<11} {r['wall_s']:.4f} s  {r['events']:>8} events  "
          f"${r['avg_cost_per_hour']:.1f}/h  x_lb {r['cost_vs_lb']:.3f}  SLO {100 * r['slo_attainment']:.1f}%  "
          f"(profiled {100 * r['slo_attainment_profiled']:.1f}%)" if r["slo_attainment"] is not None else
          f"  {r['policy']:<11} {r['wall_s']:.4f} s  lower bound ${r['avg_cost_per_hour']:.1f}/h")
PY
rm -f /tmp/loom-bench-sim.$$

echo "-- Figure 15 a-c: 12 settings x 3 seeds, loom/random/greedy/lb, 2 threads"
t0=$(now)
"$loom" sim sweep --seeds 3 --threads 2 | tee /tmp/loom-bench-sweep.$$ | tail -n +1
t1=$(now)
python3 -c "print(f'whole sweep: {float(\"$t1\") - float(\"$t0\"):.2f} s wall (target < 60 s on 2 cores)')"
rm -f /tmp/loom-bench-sweep.$$

echo "-- the oracle on small Poisson instances (12 jobs, 1/h, 4 h mean; exact search)"
for s in 1 2 3 4 5 6; do
  "$loom" sim --arrivals poisson:1 --jobs 12 --duration-h 4 --seed "$s" --policy loom,oracle,lb \
    --csv --no-progress | python3 -c "
import csv, sys
r = {x['policy']: x for x in csv.DictReader(sys.stdin)}
c = {p: float(r[p]['total_cost']) for p in r}
print(f'  seed $s: lb \${c[\"lb\"]:.0f}  oracle \${c[\"oracle\"]:.0f}  loom \${c[\"loom\"]:.0f}'
      f'  loom/oracle {c[\"loom\"] / c[\"oracle\"]:.3f}  oracle wall {float(r[\"oracle\"][\"wall_s\"]):.3f} s')"
done

echo "-- WEAVE §6.2 micro-benchmarks"
for m in temporal trainmux spatial; do "$loom" micro "$m"; done
