#!/usr/bin/env bash
# price.sh - loom against the simple ways at three rollout/training price ratios, on the 11
# bundled windows (docs/sim.md, "At any price"). Prints numbers; never fails on them.
# Usage: price.sh [BUILD_DIR] [extra loom sim options...]   (run from anywhere)
set -euo pipefail
loom="$(cd "${1:-build}" && pwd)/loom"
shift || true
cd "$(dirname "$0")/.."
windows="103959:165:300 0e4a51:0:300 11cb48:0:300 2869ce:0:300 6214e9:0:300 6c71a0:0:300 \
7f04ca:0:300 b436b2:0:300 e13805:0:300 ed69ec:0:300 ee9e8c:0:300"
for cl in ${PRICE_WINDOWS_SKIP:+none} h20-h800 bench/clusters/ratio-0.5.json h100; do
  [ "$cl" = none ] && break
  echo "-- --cluster $cl, --admission p99 $*"
  for w in $windows; do
    IFS=: read -r t a n <<<"$w"
    "$loom" sim --trace "traces/philly/$t.csv" --rows "$a:$n" --cluster "$cl" --admission p99 \
      --policy loom,colocated,colocated-slo,solo --json --no-progress "$@"
  done | python3 -c "
import json, math, sys
rows = [json.loads(l) for l in sys.stdin]
runs = [rows[i:i + 4] for i in range(0, len(rows), 4)]
logs, below = [], 0
for r in runs:
    p = {d['policy']: d for d in r}
    l = p['loom']
    c, cs, so = (p[k]['total_cost'] / l['total_cost'] for k in ('colocated', 'colocated-slo', 'solo'))
    logs.append(math.log(c))
    below += c < 1
    print(f\"  \${l['total_cost']:>9,.0f}  colocated/loom {c:.3f}  colocated-slo/loom {cs:.3f}  \"
          f\"Solo-D/loom {so:.3f}  SLO loom {100 * l['slo_attainment']:.1f}% \"
          f\"colocated {100 * p['colocated']['slo_attainment']:.1f}%\")
print(f'  geometric mean colocated/loom {math.exp(sum(logs) / len(logs)):.3f}; windows below 1.00: {below}')
"
done
for cl in h20-h800 bench/clusters/ratio-0.5.json h100; do
  echo "-- loom sim sweep --cluster $cl --admission p99 --seeds 3: colocated/loom per setting"
  "$loom" sim sweep --cluster "$cl" --admission p99 --seeds 3 --threads 2 \
    --policy loom,colocated --json "$@" | python3 -c "
import json, sys
by = {}
for r in map(json.loads, sys.stdin):
    by.setdefault((r['figure'], r['setting']), {})[r['policy']] = r
below = 0
for (f, s), d in by.items():
    x = d['colocated']['avg_cost_per_hour'] / d['loom']['avg_cost_per_hour']
    below += x < 1
    print(f'  {f} {s:<14} colocated/loom {x:.3f}  SLO loom {100 * d[\"loom\"][\"slo_attainment\"]:.1f}%')
print(f'  settings below 1.00: {below} of {len(by)}')
"
done
