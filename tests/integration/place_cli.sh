#!/usr/bin/env bash
# `loom place` end to end: the example places as documented, invalid scenarios exit 1 with
# file:line:column and print no decision, usage errors exit 2. $1 build dir, $2 source dir.
set -u
b=$1 src=$2
loom="$b/loom"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 pass=0
check() { # name, condition...
        local name=$1
        shift
        if "$@"; then pass=$((pass + 1)); else echo "FAIL: $name"; fail=$((fail + 1)); fi
}

out=$("$loom" place "$src/examples/temporal-mux.json")
check "example exits 0" test $? -eq 0
check "two decisions" test "$(printf '%s\n' "$out" | wc -l)" -eq 2
check "A opens a group" grep -q '"job":"A","decision":"new_group","group":0' <<<"$out"
check "B direct-packs at 260 s, paying for A's planned rollout node" grep -q '"job":"B","decision":"direct_pack","group":0,"rollout_nodes":\[0\],"train_nodes":\[0\],"marginal_cost_per_hour":14.8,"t_meta_s":260.0' <<<"$out"

off=$("$loom" place --colocate-lone off "$src/examples/temporal-mux.json")
check "with --colocate-lone off A pays for its rollout node at once" grep -q '"job":"A","decision":"new_group","group":0,"rollout_nodes":\[0\],"train_nodes":\[0\],"marginal_cost_per_hour":57.04' <<<"$off"
check "and B direct-packs at +\$0" grep -q '"job":"B","decision":"direct_pack","group":0,"rollout_nodes":\[0\],"train_nodes":\[0\],"marginal_cost_per_hour":0.0,"t_meta_s":260.0' <<<"$off"
"$loom" place --colocate-lone sometimes "$src/examples/temporal-mux.json" >/dev/null 2>&1
check "--colocate-lone takes on or off (exit 2)" test $? -eq 2

# A job's own switch (switch_s) decides whether it may run alone on its training nodes: at
# the policy's 5 s two switches do not fit a 1.05 SLO on a 150 s iteration, at its own 1 s they do.
job='"rollout_gpus": 8, "train_gpus": 8, "t_roll_s": 100, "t_train_s": 50, "slo": 1.05'
echo "{\"policy\": {\"warm_switch_s\": 5}, \"jobs\": [{\"id\": \"j\", $job}]}" >"$tmp/sw0.json"
echo "{\"policy\": {\"warm_switch_s\": 5}, \"jobs\": [{\"id\": \"j\", $job, \"switch_s\": 1}]}" >"$tmp/sw1.json"
check "at the policy's switch a job keeps its rollout node" grep -q '"job":"j","decision":"new_group","group":0,"rollout_nodes":\[0\],"train_nodes":\[0\],"marginal_cost_per_hour":57.04' <<<"$("$loom" place "$tmp/sw0.json")"
check "at its own 1 s it runs alone on its training node" grep -q '"job":"j","decision":"new_group","group":0,"rollout_nodes":\[0\],"train_nodes":\[0\],"marginal_cost_per_hour":42.24' <<<"$("$loom" place "$tmp/sw1.json")"

# Same input, same bytes.
check "deterministic" test "$("$loom" place "$src/examples/temporal-mux.json")" = "$out"

# Invalid: the second job's SLO is below 1. Nothing may be printed on stdout.
cat >"$tmp/bad.json" <<'JSON'
{"jobs": [
  {"id": "A", "rollout_gpus": 8, "train_gpus": 8, "t_roll_s": 10, "t_train_s": 10, "slo": 1.5},
  {"id": "B", "rollout_gpus": 8, "train_gpus": 8, "t_roll_s": 10, "t_train_s": 10, "slo": 0.9}
]}
JSON
"$loom" place "$tmp/bad.json" >"$tmp/out" 2>"$tmp/err"
check "invalid exits 1" test $? -eq 1
check "nothing placed" test ! -s "$tmp/out"
check "file:line:col and field" grep -q "bad.json:3:.*jobs\[1\].slo" "$tmp/err"

printf '{"jobs": [\n  {"id": "A",,}\n]}' >"$tmp/syntax.json"
"$loom" place "$tmp/syntax.json" >"$tmp/out" 2>"$tmp/err"
check "syntax error exits 1" test $? -eq 1
check "syntax error position" grep -q "syntax.json:2:" "$tmp/err"

"$loom" place "$tmp/missing.json" >/dev/null 2>"$tmp/err"
check "missing file exits 1" test $? -eq 1
check "missing file named once" test "$(grep -o "missing.json" "$tmp/err" | wc -l)" -eq 1
: >"$tmp/empty.json"
"$loom" place "$tmp/empty.json" >/dev/null 2>"$tmp/err"
check "empty file: 1:1, not -1:-1 or column 0" grep -q "empty.json:1:1: invalid JSON: empty" "$tmp/err"
printf '{"jobs": [\n' >"$tmp/cut.json"
"$loom" place "$tmp/cut.json" >/dev/null 2>"$tmp/err"
check "file cut short: the end's line and column" grep -q "cut.json:2:1: invalid JSON" "$tmp/err"
echo '{"jobs": [{"id": "A", "rollout_gpu": 8}]}' >"$tmp/typo.json"
"$loom" place "$tmp/typo.json" >/dev/null 2>"$tmp/err"
check "unknown field suggests the nearest" grep -qF 'jobs[0].rollout_gpu: unknown field (did you mean "rollout_gpus"?)' "$tmp/err"
"$loom" place >/dev/null 2>&1
check "no argument exits 2" test $? -eq 2
"$loom" place --bogus x >/dev/null 2>&1
check "unknown option exits 2" test $? -eq 2
"$loom" place --help >/dev/null
check "--help exits 0" test $? -eq 0
"$loom" nonsense >/dev/null 2>&1
check "unknown command exits 2" test $? -eq 2

# A job too big for any node is rejected with a reason, the rest are placed.
cat >"$tmp/big.json" <<'JSON'
{"jobs": [
  {"id": "huge", "rollout_gpus": 8, "train_gpus": 8, "t_roll_s": 10, "t_train_s": 10,
   "slo": 1.5, "mem_rollout_gb": 5000},
  {"id": "ok", "rollout_gpus": 8, "train_gpus": 8, "t_roll_s": 10, "t_train_s": 10, "slo": 1.5}
]}
JSON
out=$("$loom" place --compact "$tmp/big.json")
check "too big rejected" grep -q '"job":"huge","decision":"rejected"' <<<"$out"
check "next job placed" grep -q '"job":"ok","decision":"new_group","group":0' <<<"$out"

# A bare job object is a scenario of one job on the defaults; its errors name the field.
echo '{"id":"solo","rollout_gpus":8,"train_gpus":8,"t_roll_s":10,"t_train_s":10,"slo":1.5}' \
        >"$tmp/bare.json"
out=$("$loom" place --compact "$tmp/bare.json")
check "bare job placed" grep -q '"job":"solo","decision":"new_group"' <<<"$out"
echo '{"rollout_gpus":8,"train_gpus":8,"t_roll_s":10,"t_train_s":10,"slo":0.5}' >"$tmp/bad1.json"
err=$("$loom" place "$tmp/bad1.json" 2>&1 >/dev/null)
check "bare job error names the field" grep -q 'bad1.json:1:[0-9]*: slo:' <<<"$err"

echo "$pass passed, $fail failed"
test "$fail" -eq 0
