#!/usr/bin/env bash
# sim_timeline.sh - `loom sim --timeline` and `--cluster` end to end: on a small window, for every
# policy that has a timeline and under learned admission, failures and drift, the bill, node
# occupancy, switches, iterations and SLO verdicts are recomputed from the timeline alone
# (sim_timeline.py) and must agree with the report; three jobs that run alone cost the same
# under loom (lone members) and colocated; cluster presets and files, and their errors.
# Usage: sim_timeline.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
loom="$build/loom"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src"
fail() { echo "FAIL: $*" >&2; exit 1; }

pols="loom,loom-nomig,solo,colocated,random,greedy,random-slo,greedy-slo,regroup,gavel"
audit() { # name, then loom sim options
  local n=$1; shift
  "$loom" sim --rows 165:16 --policy "$pols" --json --no-progress --timeline "$tmp/$n.tl" \
    --per-job "$tmp/$n.csv" "$@" >"$tmp/$n.json"
  python3 "$src/tests/integration/sim_timeline.py" "$tmp/$n.tl" "$tmp/$n.json" "$tmp/$n.csv" \
    >/dev/null || fail "timeline audit: $n ($*)"
}
audit worst
audit p99 --admission p99
# the audit covers a training pool a join grew and a departure shrank (policy.pool_grow)
grep -q '"policy":"loom".*"pool_grown":[1-9]' "$tmp/p99.json" || fail "no pool grew in the p99 audit"
audit faults --admission p99 --mtbf-h 20 --drift mixed
audit h100 --cluster h100 --colocated-factor 1.2 --admission p99
grep -q '"price":\[6.155000,6.155000\]' "$tmp/h100.tl" || fail "h100 prices in the timeline"
grep -q '"train_gpu_h":6.155' "$tmp/h100.json" || fail "--json echoes the prices"
grep -q '"stop"' "$tmp/faults.tl" && grep -q '"restart"' "$tmp/faults.tl" || fail "no stops"

# same bytes twice
"$loom" sim --rows 165:16 --policy "$pols" --json --no-progress --timeline "$tmp/again.tl" \
  --per-job "$tmp/again.csv" >/dev/null
cmp -s "$tmp/worst.tl" "$tmp/again.tl" || fail "two timelines of one run differ"

# three jobs far apart, every phase at its worst case: each runs alone, loom's lone member on
# its training nodes exactly as the colocated baseline runs it (the same switches, the same $)
"$loom" sim --arrivals poisson:0.01 --jobs 3 --duration-h 2 --deterministic --admission worst \
  --policy loom,colocated --json --no-progress >"$tmp/lone.json"
python3 - "$tmp/lone.json" <<'PY' || fail "three lone jobs: loom and colocated differ"
import json, sys
r = {x["policy"]: x for x in map(json.loads, open(sys.argv[1]))}
a, b = r["loom"], r["colocated"]
assert a["total_cost"] == b["total_cost"], (a["total_cost"], b["total_cost"])
assert a["warm_switches"] == b["warm_switches"], (a["warm_switches"], b["warm_switches"])
PY

# a cluster file: the same object as a scenario's, alone or under "cluster"
cat >"$tmp/c.json" <<'J'
{"gpus_per_node": 8, "host_mem_gb": 2048,
 "rollout_gpu": {"name": "H100", "price_per_hour": 6.155},
 "train_gpu": {"name": "H100", "price_per_hour": 6.155}}
J
printf '{"cluster": %s, "jobs": []}\n' "$(cat "$tmp/c.json")" >"$tmp/scenario.json"
for f in c.json scenario.json; do
  "$loom" sim --rows 165:8 --policy loom --json --no-progress --cluster "$tmp/$f" |
    grep -q '"rollout_gpu_h":6.155' || fail "--cluster $f"
done
printf '{"gpus_per_node": 8,\n "train_gpu": {"price_per_hour": -3}}\n' >"$tmp/bad.json"
set +e
"$loom" sim --rows 165:8 --policy loom --cluster "$tmp/bad.json" >"$tmp/out" 2>"$tmp/err"; rc=$?
"$loom" sim --rows 165:8 --policy loom --cluster nosuch-preset >/dev/null 2>&1; rc2=$?
"$loom" sim sweep --timeline "$tmp/x.tl" >/dev/null 2>&1; rc3=$?
set -e
[ $rc -eq 1 ] || fail "a bad cluster file must exit 1, got $rc"
grep -q "bad.json:2:34: train_gpu.price_per_hour" "$tmp/err" || fail "message: $(cat "$tmp/err")"
[ ! -s "$tmp/out" ] || fail "a report was printed"
[ $rc2 -eq 1 ] || fail "an unknown preset (no such file) must exit 1, got $rc2"
[ $rc3 -eq 2 ] || fail "--timeline with sweep must exit 2, got $rc3"
[ ! -e "$tmp/x.tl" ] || fail "a timeline was written for a refused study"
echo ok
