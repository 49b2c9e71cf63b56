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

echo "-- Figure 15 a-c: 12 settings x 3 seeds, loom/random/greedy/random-slo/greedy-slo/lb, 2 threads"
t0=$(now)
"$loom" sim sweep --seeds 3 --threads 2 | tee /tmp/loom-bench-sweep.$$ | tail -n +1
t1=$(now)
python3 -c "print(f'whole sweep: {float(\"$t1\") - float(\"$t0\"):.2f} s wall (target < 60 s on 2 cores)')"
rm -f /tmp/loom-bench-sweep.$$

echo "-- fair baselines: random-slo and greedy-slo against loom on every sweep setting (3 seeds)"
"$loom" sim sweep --seeds 3 --threads 2 --json --policy loom,random-slo,greedy-slo |
  python3 -c "
import json, sys
by = {}
for r in map(json.loads, sys.stdin):
    by.setdefault((r['figure'], r['setting']), {})[r['policy']] = r
worse = 0
for (f, s), d in by.items():
    l = d['loom']['avg_cost_per_hour']
    rs, gs = d['random-slo']['avg_cost_per_hour'] / l, d['greedy-slo']['avg_cost_per_hour'] / l
    worse += rs <= 1 or gs <= 1
    print(f'  {f} {s:<14} random-slo/loom {rs:.3f}  greedy-slo/loom {gs:.4f}  SLO loom '
          f\"{100 * d['loom']['slo_attainment']:.1f}% rs {100 * d['random-slo']['slo_attainment']:.1f}% \"
          f\"gs {100 * d['greedy-slo']['slo_attainment']:.1f}%\")
print(f'  settings where loom is not cheaper than both (target 0): {worse}')"

echo "-- learned-profile admission (plans on a 90% upper bound of the quantile, docs/scheduling.md):"
echo "   the normal bound, the fleet prior, lone and shared members moved, each job's own"
echo "   switch and rollouts planned on their heads (the defaults), and each undone,"
echo "   on four Philly virtual clusters"
echo "   (targets: default window p99 colocated/loom >= 1.2, solo/loom >= 1.6, SLO >= 99%;"
echo "    the other three windows colocated/loom >= 1.1)"
for w in "103959.csv 165:300" "0e4a51.csv 0:300" "6214e9.csv 0:300" "b436b2.csv 0:300"; do
  set -- $w
  for a in worst p99 p95 "p99 --learn-bound order" "p99 --move-members off" "p99 --move-lone off" \
    "p99 --job-switch off" "p99 --plan-tails off"; do
    "$loom" sim --trace "traces/philly/$1" --rows "$2" --admission $a \
      --policy loom,solo,colocated,lb --json --no-progress | python3 -c "
import json, sys
r = {d['policy']: d for d in map(json.loads, sys.stdin)}
l = r['loom']
print(f\"  $1 $2 $a: loom x_lb {l['cost_vs_lb']:.3f}  colocated/loom \"
      f\"{r['colocated']['total_cost'] / l['total_cost']:.3f}  solo/loom \"
      f\"{r['solo']['total_cost'] / l['total_cost']:.3f}  SLO {100 * l['slo_attainment']:.1f}% \"
      f\"(profiled {100 * l['slo_attainment_profiled']:.1f}%)  train idle \"
      f\"{100 * l['train_bubble']:.0f}%  re-admitted {l['resubmits']} (moved {l['moves']})\")"
  done
done

echo "-- where the cost goes: no drift, default SLOs vs SLO fixed:3 and groups of 16"
for o in "" "--slo fixed:3 --max-group 16"; do
  "$loom" sim $o --policy loom,greedy,regroup,lb --json --no-progress | python3 -c "
import json, sys
for r in map(json.loads, sys.stdin):
    if r['policy'] != 'lb':
        print(f\"  ${o:-default}: {r['policy']:<8} \${r['avg_cost_per_hour']:.1f}/h  x_lb \"
              f\"{r['cost_vs_lb']:.3f}  SLO {100 * r['slo_attainment']:.1f}%  train idle \"
              f\"{100 * r['train_bubble']:.0f}%\")"
done

echo "-- where the cost goes: the ladder from the fluid bound (loom sim --decompose), default window"
for a in worst p99 "p99 --oracle-rates" "p99 --oracle-rates --oracle-restarts"; do
  echo "   admission $a"
  "$loom" sim --decompose --admission $a --no-progress | sed 's/^/  /'
done

echo "-- drift (WEAVE §6.6, Figure 17): static loom vs hourly regroup on the default window"
for d in increasing decreasing mixed; do
  "$loom" sim --drift "$d" --policy loom,random,greedy,random-slo,greedy-slo,regroup,lb --json \
    --no-progress | python3 -c "
import json, sys
r = {d['policy']: d for d in map(json.loads, sys.stdin)}
g = r['regroup']
c = lambda p: r[p]['total_cost'] / g['total_cost']
print(f\"  $d: loom/regroup {c('loom'):.3f}  SLO loom {100 * r['loom']['slo_attainment']:.1f}% \"
      f\"regroup {100 * g['slo_attainment']:.1f}%  random/regroup {c('random'):.3f} \"
      f\"greedy/regroup {c('greedy'):.3f}  random-slo/regroup {c('random-slo'):.3f} \"
      f\"greedy-slo/regroup {c('greedy-slo'):.3f}  regroup migrating {g['regroup_migration_h']:.1f} \"
      f\"job-h of {g['makespan_h']:.0f} h  loom resubmits {r['loom']['resubmits']}\")"
done

echo "-- failures (mean 200 h between failures of a running job, 3 restarts)"
"$loom" sim --mtbf-h 200 --policy loom,solo,colocated --json --no-progress | python3 -c "
import json, sys
for r in map(json.loads, sys.stdin):
    print(f\"  {r['policy']:<10} \${r['avg_cost_per_hour']:.1f}/h  restarts {r['restarts']}  failed \"
          f\"{r['jobs_failed']}  SLO {100 * r['slo_attainment']:.1f}%\")"

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

echo "-- the oracle with 20 jobs active at once (20 jobs in ~20 min, 10 h each; branch and bound)"
for s in 1 2 3; do
  "$loom" sim --arrivals poisson:60 --jobs 20 --duration-h 10 --seed "$s" --policy loom,oracle,lb \
    --json --no-progress | python3 -c "
import json, sys
r = {x['policy']: x for x in map(json.loads, sys.stdin)}
c = {p: r[p]['total_cost'] for p in r}
print(f\"  seed $s: lb \${c['lb']:.0f}  oracle \${c['oracle']:.0f}  loom \${c['loom']:.0f}  loom/oracle \"
      f\"{c['loom'] / c['oracle']:.3f}  oracle wall {r['oracle']['wall_s']:.2f} s ({r['oracle']['note']})\")"
done
echo "-- the oracle on the default window, against loom, Solo-D and colocated"
"$loom" sim --policy loom,solo,colocated,oracle,gavel,lb --no-progress

echo "-- WEAVE §6.2 micro-benchmarks"
for m in temporal trainmux spatial; do "$loom" micro "$m"; done

echo "-- multi-rate groups and colocated lone members: loom with --multirate and --colocate-lone"
echo "   on and off on four Philly virtual clusters"
echo "   (targets on the default window, p99: colocated/loom >= 1.2, solo/loom >= 1.6, SLO >= 99%)"
for w in "103959.csv 165:300" "0e4a51.csv 0:300" "6214e9.csv 0:300" "b436b2.csv 0:300"; do
  set -- $w
  for a in worst p99; do
    for m in "on on" "on off" "off off"; do
      set -- $1 $2 $m
      "$loom" sim --trace "traces/philly/$1" --rows "$2" --admission "$a" --multirate "$3" \
        --colocate-lone "$4" --policy loom,solo,colocated,lb --json --no-progress | python3 -c "
import json, sys
p = {r['policy']: r for r in map(json.loads, sys.stdin)}
l = p['loom']
print(f\"  $1 $2 {'$a':<5} multirate {'$3':<3} lone {'$4':<3}: \${l['avg_cost_per_hour']:.1f}/h  \"
      f\"colocated/loom {p['colocated']['total_cost'] / l['total_cost']:.3f}  \"
      f\"solo/loom {p['solo']['total_cost'] / l['total_cost']:.3f}  \"
      f\"SLO {100 * l['slo_attainment']:.1f}% (profiled {100 * l['slo_attainment_profiled']:.1f}%)  \"
      f\"mean rate {l['mean_rate']:.2f}\")"
    done
  done
done

echo "-- the price of a rollout GPU: the default window under p99 on each cluster preset"
echo "   (h20-h800: rollout/training price ratio 0.35; h100, h200: one GPU type, ratio 1.0)"
for cl in h20-h800 h100 h200; do
  "$loom" sim --cluster $cl --admission p99 --policy loom,solo,colocated --json --no-progress |
    python3 -c "
import json, sys
p = {r['policy']: r for r in map(json.loads, sys.stdin)}
l = p['loom']
pr = l['prices']
print(f\"  $cl: {pr['rollout_gpu']} \${pr['rollout_gpu_h']:.3f}, {pr['train_gpu']} \${pr['train_gpu_h']:.3f}\"
      f\" per GPU-h  loom \${l['total_cost']:,.0f}  colocated/loom \"
      f\"{p['colocated']['total_cost'] / l['total_cost']:.3f}  solo/loom \"
      f\"{p['solo']['total_cost'] / l['total_cost']:.3f}  SLO {100 * l['slo_attainment']:.1f}% \"
      f\"(profiled {100 * l['slo_attainment_profiled']:.1f}%)\")"
done
