#!/usr/bin/env bash
# plex_cli.sh - PlexRL's commands end to end: `loom micro plex-bubbles|plex-pack`, `loom sim
# --policy plex-*` (JSON keys, determinism, the CDF plot, loom vs plex), `loom bench hrrs`,
# `loom bench placement --placer plex`, and bad usage.
# Usage: plex_cli.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
loom="$build/loom"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src"
# cairo's font cache (fontconfig) keeps a few allocations until exit; they are not ours.
printf 'leak:libfontconfig\nleak:FcValueSave\n' >"$tmp/lsan.supp"
export LSAN_OPTIONS="suppressions=$tmp/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

fail() { echo "FAIL: $*" >&2; exit 1; }
py=/usr/bin/python3

"$loom" micro plex-bubbles --help | grep -q "plex-pack" || fail "micro plex --help"
"$loom" sim --policy plex-all --help | grep -q "plex-backfill" || fail "sim plex --help"
set +e
"$loom" sim --policy plex-nosuch >/dev/null 2>&1; [ $? -eq 2 ] || fail "unknown plex policy must exit 2"
"$loom" sim --policy plex-pack --nodes 3 >/dev/null 2>&1; [ $? -eq 2 ] || fail "--nodes 3 must exit 2"
"$loom" micro plex-pack --dispatch lifo >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad --dispatch must exit 2"
"$loom" bench placement --placer best >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad --placer must exit 2"
"$loom" bench placement --reps 0 >/dev/null 2>&1; [ $? -eq 2 ] || fail "--reps 0 must exit 2"
printf 'job_id,arrival_s,duration_s,gpus,source_model\na,0,100,1,x\nb,10,abc,2,y\n' >"$tmp/bad.csv"
"$loom" sim --policy plex-pack --trace "$tmp/bad.csv" >/dev/null 2>"$tmp/err"; [ $? -eq 1 ] || fail "bad trace must exit 1"
set -e
grep -q "bad.csv:3:" "$tmp/err" || fail "trace error without file:line: $(cat "$tmp/err")"

# Table 2 bubbles: one JSON line, every model within 0.01 points of the paper.
"$loom" micro plex-bubbles --json >"$tmp/b.json"
[ "$(wc -l <"$tmp/b.json")" -eq 1 ] || fail "plex-bubbles --json is not one line"
$py - "$tmp/b.json" <<'PY' || fail "plex-bubbles"
import json, sys
o = json.load(open(sys.argv[1]))
assert [m["model"] for m in o["models"]] == ["7B", "30B", "235B"], o
for m in o["models"]:
    assert abs(m["bubble"] - m["paper_bubble"]) < 1e-4, m
PY

# Two-job packing saves GPU-hours for every model.
"$loom" micro plex-pack --json --iterations 40 >"$tmp/p.json"
$py - "$tmp/p.json" <<'PY' || fail "plex-pack"
import json, sys
o = json.load(open(sys.argv[1]))
assert len(o["models"]) == 4, o
for m in o["models"]:
    assert 0 < m["gpu_hours_saved"] < 0.6, m
PY

# The cluster policies: keys, sharing beats isolation, determinism, plot.
args="--policy plex-all --window 165:120 --nodes 16 --no-weave --json"
"$loom" sim $args --plot "$tmp/plot" >"$tmp/s1.json"
"$loom" sim $args >"$tmp/s2.json"
cmp -s <(grep -v compare "$tmp/s1.json") <(grep -v compare "$tmp/s2.json") || fail "plex sim is not deterministic"
grep -q "<svg" "$tmp/plot/plex_queue_delay_cdf.svg" || fail "no CDF plot"
$py - "$tmp/s1.json" <<'PY' || fail "plex sim json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
pol = {r["policy"]: r for r in rows if "policy" in r}
assert set(pol) == {"plex-isolated", "plex-pack", "plex-spread", "plex-backfill"}, pol
for r in pol.values():
    for k in ("makespan_h", "queue_delay_p50", "queue_delay_p99", "switches_per_h"):
        assert k in r, (k, r)
iso = pol["plex-isolated"]
assert iso["switches_per_h"] == 0
assert pol["plex-backfill"]["makespan_h"] < iso["makespan_h"]
assert pol["plex-backfill"]["queue_delay_p99"] <= iso["queue_delay_p99"]
disp = [r for r in rows if r.get("compare") == "dispatch"]
assert len(disp) == 9, disp
for m in ("7B", "30B", "235B"):
    d = {r["dispatch"]: r for r in disp if r["model"] == m}
    assert d["hrrs"]["switches_per_h"] < d["fcfs"]["switches_per_h"], d
    assert d["hrrs"]["delay_mean"] <= d["fcfs"]["delay_mean"], d
PY

# loom and the plex placer through the same core and simulator.
"$loom" sim --policy plex-backfill --window 165:30 --no-dispatch --json >"$tmp/w.json"
$py - "$tmp/w.json" <<'PY' || fail "weave compare"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
w = {r["placer"]: r for r in rows if r.get("compare") == "weave"}
assert set(w) == {"loom+rr", "plex+hrrs"}, rows
for r in w.values():
    assert r["avg_cost_per_hour"] > 0 and 0 <= r["slo_attainment"] <= 1, r
    assert 0 <= r["slo_attainment_profiled"] <= 1, r
PY

# Benchmarks print one JSON line each (figures are in bench/placement.sh, not checked here).
"$loom" bench hrrs --probes 1000 | grep -q '"decision_us"' || fail "bench hrrs"
"$loom" bench placement --placer plex --n 50 --probes 20 | grep -q '"pruned_fraction"' ||
        fail "bench placement --placer plex"
# deciding a probe again changes nothing: the same placed jobs, the same bill
one=$("$loom" bench placement --n 300 --probes 50 | grep -o '"cost_per_hour":[0-9.]*')
three=$("$loom" bench placement --n 300 --probes 50 --reps 3 | grep -o '"cost_per_hour":[0-9.]*')
[ -n "$one" ] && [ "$one" = "$three" ] || fail "bench --reps 3 changed the fill: $one vs $three"
# loomd takes placer and dispatch from its --cluster file: two Table 2 7B jobs given as
# serviceized calls share one training node, each on rollout nodes of its own.
loomd="$build/loomd"
printf '{"cluster":{},"policy":{"placer":"plex","dispatch":"hrrs"}}' >"$tmp/cl.json"
mkdir -p "$tmp/d"
"$loomd" --data-dir "$tmp/d" --listen 127.0.0.1:0 --port-file "$tmp/d/port" \
        --cluster "$tmp/cl.json" --quiet &
lpid=$!
trap 'kill $lpid 2>/dev/null; wait $lpid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do [ -s "$tmp/d/port" ] && break; sleep 0.1; done
port=$(cat "$tmp/d/port")
job='"rollout_gpus":8,"train_gpus":8,"t_roll_s":231.53,"compute_log_prob_s":9.66,"update_actor_s":38.08,"sync_weight_s":9.76,"slo":1.5'
for n in a b; do
        curl -sf -XPOST "127.0.0.1:$port/v1/jobs" -d "{\"name\":\"$n\",$job}" >"$tmp/$n.json" ||
                fail "loomd submit $n"
done
curl -sf "127.0.0.1:$port/v1/groups" >"$tmp/groups.json" || fail "loomd groups"
$py - "$tmp/b.json" "$tmp/groups.json" <<'PY' || fail "loomd plex placement"
import json, sys
b = json.load(open(sys.argv[1]))
assert "plex: fits group 0" in b["decision"]["reason"], b["decision"]
assert abs(b["spec"]["t_train_s"] - 57.5) < 1e-6, b["spec"]
g = json.load(open(sys.argv[2]))["groups"]
assert len(g) == 1 and g[0]["members"] == [1, 2] and len(g[0]["rollout_nodes"]) == 2, g
PY
# A permit per training call: job 1 runs compute_log_prob, update_actor, sync_weight as three
# leases, and only the last one completes its iteration.
$py - "$port" <<'PY' || fail "loomd per-call permits"
import json, sys, urllib.request
base = "http://127.0.0.1:%s" % sys.argv[1]
def post(path, body=None):
    req = urllib.request.Request(base + path, data=json.dumps(body or {}).encode(), method="POST")
    return json.load(urllib.request.urlopen(req, timeout=10))
def get(path):
    return json.load(urllib.request.urlopen(base + path, timeout=10))
l = post("/v1/jobs/1/phases/rollout/acquire?wait=5")
assert l["phase"] == "rollout" and "call" not in l, l
post("/v1/leases/%d/release" % l["lease"], {"status": "ok"})
seen = []
for want in ("compute_log_prob", "update_actor", "sync_weight"):
    assert get("/v1/jobs/1")["iterations_done"] == 0
    l = post("/v1/jobs/1/phases/train/acquire?wait=5")
    assert l["phase"] == "train" and l["call"] == want and l["calls"] == 3, l
    seen.append(l["call_index"])
    post("/v1/leases/%d/release" % l["lease"], {"status": "ok"})
assert seen == [0, 1, 2], seen
j = get("/v1/jobs/1")
assert j["iterations_done"] == 1 and j["next_phase"] == "rollout", j
PY
# The plex placer's settings decide placement, so the data dir refuses another plex_alpha (the
# dispatch order may change: it is not replayed).
kill $lpid
wait $lpid 2>/dev/null
printf '{"cluster":{},"policy":{"placer":"plex","dispatch":"hrrs","plex_alpha":0.9}}' >"$tmp/alpha.json"
set +e
timeout 20 "$loomd" --data-dir "$tmp/d" --listen 127.0.0.1:0 --cluster "$tmp/alpha.json" --quiet 2>"$tmp/err"
rc=$?
set -e
[ $rc -eq 1 ] && grep -q 'another policy' "$tmp/err" || fail "another plex_alpha must be refused ($rc): $(cat "$tmp/err")"
printf '{"cluster":{},"policy":{"placer":"plex","dispatch":"rr"}}' >"$tmp/rr.json"
"$loomd" --data-dir "$tmp/d" --listen 127.0.0.1:0 --port-file "$tmp/d/port2" \
        --cluster "$tmp/rr.json" --quiet &
lpid=$!
for _ in $(seq 100); do [ -s "$tmp/d/port2" ] && break; sleep 0.1; done
curl -sf "127.0.0.1:$(cat "$tmp/d/port2")/v1/groups" | grep -q '"members":\[1,2\]' ||
        fail "restart with another dispatch order keeps the groups"
# A crash between two training calls: after kill -9 and a restart, job 1 goes on with its
# second call; the first is not run again, and the iteration counts once.
calls() { # port, then the calls expected (name:index), each granted and released
        $py - "$@" <<'PY'
import json, sys, urllib.request
base = "http://127.0.0.1:%s" % sys.argv[1]
def post(path, body=None):
    req = urllib.request.Request(base + path, data=json.dumps(body or {}).encode(), method="POST")
    return json.load(urllib.request.urlopen(req, timeout=10))
for want in sys.argv[2:]:
    phase = "rollout" if want == "rollout" else "train"
    l = post("/v1/jobs/1/phases/%s/acquire?wait=5" % phase)
    got = "rollout" if phase == "rollout" else "%s:%d" % (l.get("call"), l.get("call_index", -1))
    assert got == want, (got, want, l)
    post("/v1/leases/%d/release" % l["lease"], {"status": "ok"})
PY
}
calls "$(cat "$tmp/d/port2")" rollout compute_log_prob:0 || fail "first call before the crash"
kill -9 $lpid
wait $lpid 2>/dev/null || true
"$loomd" --data-dir "$tmp/d" --listen 127.0.0.1:0 --port-file "$tmp/d/port3" \
        --cluster "$tmp/rr.json" --quiet &
lpid=$!
for _ in $(seq 100); do [ -s "$tmp/d/port3" ] && break; sleep 0.1; done
p3=$(cat "$tmp/d/port3")
curl -sf "127.0.0.1:$p3/v1/jobs/1" | grep -q '"iterations_done":1,' || fail "1 iteration before the crash"
calls "$p3" update_actor:1 sync_weight:2 || fail "after the crash the calls go on, not over"
curl -sf "127.0.0.1:$p3/v1/jobs/1" | grep -q '"iterations_done":2,' ||
        fail "the iteration across the crash counts once: $(curl -s "127.0.0.1:$p3/v1/jobs/1")"
printf '{"cluster":{},"policy":{"placer":"plex","dispatch":"lifo"}}' >"$tmp/bad.json"
set +e
"$loomd" --data-dir "$tmp/d2" --cluster "$tmp/bad.json" 2>"$tmp/err"; rc=$?
set -e
[ $rc -eq 1 ] || fail "bad dispatch must exit 1"
grep -q 'bad.json:1:52: policy.dispatch' "$tmp/err" || fail "dispatch error: $(cat "$tmp/err")"
echo "plex_cli: ok"
