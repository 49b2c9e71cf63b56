#!/usr/bin/env bash
# `loom plan` end to end: plans on the example fleets, JSON output, determinism, the exact
# solver, clear errors for bad cluster and workflow files (file:line:column and the field),
# usage errors, the sweep table, and a job spec from --emit-job that `loom place` and a real
# loomd accept. $1 build dir, $2 source dir.
set -u
b=$1 src=$2
loom="$(cd "$b" && pwd)/loom"
ex="$src/examples/plan"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# fontconfig (under cairo's text) keeps caches for the life of the process; not ours to free.
printf 'leak:libfontconfig\nleak:FcValueSave\n' >"$tmp/lsan.supp"
export LSAN_OPTIONS="suppressions=$tmp/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
fail=0 pass=0
check() { # name, condition...
        local name=$1
        shift
        if "$@"; then pass=$((pass + 1)); else echo "FAIL: $name"; fail=$((fail + 1)); fi
}
field() { python3 -c "import json,sys; d=json.load(open('$1')); print($2)"; }

"$loom" plan --cluster "$ex/small-8.json" --model qwen3-4b --budget 20000 >"$tmp/text"
check "text plan exits 0" test $? -eq 0
check "text names iteration time" grep -q "^iteration .* s, .* tokens/s" "$tmp/text"
check "text explains" grep -q "^why:" "$tmp/text"

"$loom" plan --cluster "$ex/small-12-regions.json" --model qwen3-4b --workflow grpo --mode async \
        --budget 20000 --seed 3 --json >"$tmp/a.json"
check "json exits 0" test $? -eq 0
check "json has the required keys" python3 -c "
import json; d = json.load(open('$tmp/a.json'))
assert all(k in d for k in ('iteration_s', 'tokens_per_s', 'evaluations', 'search_s', 'plan'))
assert d['evaluations'] == 20000 and d['iteration_s'] > 0 and d['tokens_per_s'] > 0
assert len(d['plan']['tasks']) == 4 and d['plan']['groups']"
"$loom" plan --cluster "$ex/small-12-regions.json" --model qwen3-4b --workflow grpo --mode async \
        --budget 20000 --seed 3 --json >"$tmp/b.json"
check "same seed, same plan" test "$(field "$tmp/a.json" "d['plan'], d['iteration_s']")" = \
        "$(field "$tmp/b.json" "d['plan'], d['iteration_s']")"

"$loom" plan --cluster "$ex/small-8.json" --model qwen3-4b --solver exact --json >"$tmp/e.json"
check "exact proves its optimum" test "$(field "$tmp/e.json" "d['optimal']")" = True
check "sha-ea is not better than the optimum" python3 -c "
import json; e = json.load(open('$tmp/e.json'))['iteration_s']
h = json.load(open('$tmp/a.json'))
import subprocess
out = subprocess.run(['$loom', 'plan', '--cluster', '$ex/small-8.json', '--model', 'qwen3-4b',
                      '--budget', '20000', '--json'], capture_output=True, text=True).stdout
assert json.loads(out)['iteration_s'] >= e * (1 - 1e-9)"
"$loom" plan --cluster "$ex/s1-single-region.json" --solver exact >/dev/null 2>"$tmp/err"
check "exact refuses 64 GPUs" test $? -eq 1
check "exact says why" grep -q "up to 32 GPUs" "$tmp/err"
for s in verl streamrl ea; do
        "$loom" plan --cluster "$ex/small-16.json" --model qwen3-4b --mode async --solver $s \
                --budget 5000 --json >"$tmp/$s.json"
        check "$s solver runs" test $? -eq 0
done
check "streamrl overlaps generation" test "$(field "$tmp/streamrl.json" "d['plan']['overlapped']")" = True
check "verl uses one group in sync" test "$("$loom" plan --cluster "$ex/small-16.json" \
        --model qwen3-4b --solver verl --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["plan"]["groups"]))')" = 1

# Bad cluster files: exit 1, file:line:column, the field, nothing on stdout.
bad() { # name, file, pattern
        "$loom" plan --cluster "$2" --budget 10 >"$tmp/out" 2>"$tmp/err"
        local rc=$?
        check "$1 exits 1" test $rc -eq 1
        check "$1 prints nothing" test ! -s "$tmp/out"
        check "$1 message" grep -q "$3" "$tmp/err"
}
printf '{"devices": [\n  {"type": "A100", "machine": "m", "region": "r", "count": 2},\n  {"type": "B200", "machine": "n", "region": "r"}\n]}\n' >"$tmp/type.json"
bad "unknown GPU type" "$tmp/type.json" "type.json:3:.*devices\[1\].type: unknown GPU type 'B200'"
printf '{"devices": [{"type": "A100", "machine": "m", "region": "r", "cuont": 2}]}\n' >"$tmp/typo.json"
bad "unknown field" "$tmp/typo.json" "typo.json:1:.*devices\[0\].cuont: unknown field"
printf '{"devices": [{"type": "A100", "machine": "m", "region": "a"},\n {"type": "L4", "machine": "n", "region": "b"}]}\n' >"$tmp/nolink.json"
bad "missing region link" "$tmp/nolink.json" "no link between regions 'a' and 'b'"
printf '{"devices": [{"type": "A100", "machine": "m", "region": "a"}],\n "links": {"intra_region": {"latency_ms": 1, "gbps": -5}}}\n' >"$tmp/neg.json"
bad "negative bandwidth" "$tmp/neg.json" "neg.json:2:.*links.intra_region.gbps: must be > 0"
printf '{"devices": [}\n' >"$tmp/syntax.json"
bad "syntax error" "$tmp/syntax.json" "syntax.json:1:"
printf '{"name": "x"}\n' >"$tmp/nodev.json"
bad "no devices" "$tmp/nodev.json" "missing required field \"devices\""
"$loom" plan --cluster "$tmp/missing.json" >/dev/null 2>&1
check "missing file exits 1" test $? -eq 1

# Workflow files.
printf '{"algorithm": "grpo", "model": "qwen3-4b", "batch": 64, "responses": 4}\n' >"$tmp/wf.json"
"$loom" plan --cluster "$ex/small-8.json" --workflow "$tmp/wf.json" --budget 5000 --json >"$tmp/wf.out"
check "workflow file is used" test "$(field "$tmp/wf.out" "d['workflow'], d['model'], len(d['plan']['tasks'])")" = "grpo qwen3-4b 4"
printf '{"algorithm": "ppo",\n "mode": "later"}\n' >"$tmp/wfbad.json"
"$loom" plan --cluster "$ex/small-8.json" --workflow "$tmp/wfbad.json" >"$tmp/out" 2>"$tmp/err"
check "bad workflow exits 1" test $? -eq 1
check "bad workflow names mode" grep -q "wfbad.json:2:.*mode: must be \"sync\" or \"async\"" "$tmp/err"
printf '{"model": {"hidden": 4096, "layers": 36}}\n' >"$tmp/wfmodel.json"
"$loom" plan --cluster "$ex/small-8.json" --workflow "$tmp/wfmodel.json" >/dev/null 2>"$tmp/err"
check "incomplete model names the field" grep -q "model: missing required field \"intermediate\"" "$tmp/err"
printf '{"algorithm": "grpo",\n "balance": "yes"}\n' >"$tmp/wfbal.json"
"$loom" plan --cluster "$ex/small-8.json" --workflow "$tmp/wfbal.json" >"$tmp/out" 2>"$tmp/err"
check "non-boolean balance exits 1" test $? -eq 1
check "non-boolean balance names the field" grep -q "wfbal.json:2:.*balance: must be true or false" "$tmp/err"

# Load balancing: a balanced plan of the mixed fleet is never slower; --json says which tasks
# ran balanced and how their layers are split; the workflow file's flag is honoured.
"$loom" plan --cluster "$ex/small-16.json" --model qwen3-4b --workflow grpo --solver exact --json \
        >"$tmp/off.json"
"$loom" plan --cluster "$ex/small-16.json" --model qwen3-4b --workflow grpo --solver exact --json \
        --balance >"$tmp/on.json"
check "balanced exact optimum is proved and no slower" python3 -c "
import json; a = json.load(open('$tmp/off.json')); b = json.load(open('$tmp/on.json'))
assert a['optimal'] and b['optimal'] and b['iteration_s'] <= a['iteration_s'] * (1 + 1e-12)
for t in b['plan']['tasks']:
    assert sum(t['layers']) == 36 and len(t['layers']) == t['pp'] and t['balanced'] in (True, False)"
printf '{"algorithm": "grpo", "model": "qwen3-4b", "balance": true}\n' >"$tmp/wfon.json"
"$loom" plan --cluster "$ex/small-16.json" --workflow "$tmp/wfon.json" --solver exact --json >"$tmp/on2.json"
check "workflow balance flag is used" test "$(field "$tmp/on2.json" "d['iteration_s']")" = \
        "$(field "$tmp/on.json" "d['iteration_s']")"
"$loom" plan --cluster "$ex/small-16.json" --workflow "$tmp/wfon.json" --solver exact --json \
        --no-balance >"$tmp/off2.json"
check "--no-balance overrides the file" test "$(field "$tmp/off2.json" "d['iteration_s']")" = \
        "$(field "$tmp/off.json" "d['iteration_s']")"
(cd "$src" && "$loom" plan sweep --ablation load-balance --scenarios S1 --models qwen3-4b \
        --budget 3000 --plot "$tmp/plot") >"$tmp/abl"
check "ablation exits 0" test $? -eq 0
check "ablation has two rows and a gain line" test "$(grep -c '^S1 ' "$tmp/abl")" -eq 2 -a \
        "$(grep -c '^single-region: gain' "$tmp/abl")" -eq 1
check "ablation plot written" test -s "$tmp/plot/plan-balance.png" -a -s "$tmp/plot/plan-balance.svg"
"$loom" plan sweep --ablation speed >/dev/null 2>&1
check "unknown ablation exits 2" test $? -eq 2

# What the layout rule costs: the free layout is never above the plan.
"$loom" plan --cluster "$ex/small-16.json" --model qwen3-4b --workflow grpo --solver exact \
        --free-layout --json >"$tmp/free.json"
check "free layout at or below the optimum" python3 -c "
import json; d = json.load(open('$tmp/free.json'))
assert d['free_layout_s'] <= d['iteration_s'] and d['free_layout_plan']['tasks']"

# Usage errors exit 2.
"$loom" plan --model qwen3-4b >/dev/null 2>&1
check "no cluster exits 2" test $? -eq 2
"$loom" plan --cluster "$ex/small-8.json" --solver magic >/dev/null 2>&1
check "unknown solver exits 2" test $? -eq 2
"$loom" plan --cluster "$ex/small-8.json" --bogus >/dev/null 2>&1
check "unknown option exits 2" test $? -eq 2
"$loom" plan --cluster "$ex/small-8.json" --budget 5 --time 1 >/dev/null 2>&1
check "budget and time exits 2" test $? -eq 2
"$loom" plan --help >/dev/null
check "--help exits 0" test $? -eq 0
"$loom" plan sweep --help >/dev/null
check "sweep --help exits 0" test $? -eq 0

# Sweep: table and plot for one scenario and model.
(cd "$src" && "$loom" plan sweep --scenarios S1 --models qwen3-4b --budget 3000 --plot "$tmp/plot") >"$tmp/sweep"
check "sweep exits 0" test $? -eq 0
check "sweep has four rows" test "$(grep -c '^S1 ' "$tmp/sweep")" -eq 4
check "sweep compares with verl" grep -q "x_verl" "$tmp/sweep"
check "sweep plot written" test -s "$tmp/plot/plan-sweep.png" -a -s "$tmp/plot/plan-sweep.svg"

# The bridge: a job spec that loom place and loomd accept.
"$loom" plan --cluster "$ex/small-16.json" --model qwen3-4b --mode async --budget 20000 \
        --emit-job >"$tmp/job.json"
check "emit-job exits 0" test $? -eq 0
check "job spec fields" python3 -c "
import json; j = json.load(open('$tmp/job.json'))
assert j['rollout_gpus'] % 8 == 0 and j['train_gpus'] % 8 == 0
assert j['t_roll_s'] > 0 and j['t_train_s'] > 0 and j['sync_s'] >= 0 and j['slo'] == 1.5"
python3 -c "import json; print(json.dumps({'jobs': [json.load(open('$tmp/job.json'))]}))" >"$tmp/scen.json"
"$loom" place "$tmp/scen.json" >"$tmp/placed" 2>"$tmp/err"
check "loom place accepts the job" test $? -eq 0
check "loom place decides" grep -q '"decision":"new_group"' "$tmp/placed"
python3 - "$b" "$src" "$tmp/job.json" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2] + "/tests/integration")
from loomd_harness import Loomd
d = Loomd(sys.argv[1]).start()
try:
    st, body = d.req("POST", "/v1/jobs", json.load(open(sys.argv[3])))
    if st not in (200, 201):
        print(f"FAIL: loomd rejected the job: {st} {body}")
        sys.exit(1)
finally:
    d.stop()
PY
check "loomd accepts the job" test $? -eq 0

echo "plan_cli: $pass passed, $fail failed"
test $fail -eq 0
