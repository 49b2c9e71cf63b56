#!/usr/bin/env bash
# `loom sync` end to end with real processes. The loopback part always runs: every plan moves a
# small model and verifies it, topo puts one copy on the slow link, late joiners catch up, a
# corrupted bucket makes the run fail with exit 1, bad input exits 1 and bad usage 2. The shaped
# link (namespaces + veth + tc) is sync_netns.sh.
# $1 build dir, $2 source dir.
set -u
b=$1
loom="$b/loom"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 pass=0
. "$2/tests/integration/lib/sync.sh"

small=(--model tiny --bucket-mib 0.01 --density 0.02)

# ---- codec: every encoding round-trips at every density; sparse forms shrink sparse deltas
"$loom" sync codec --bucket-mib 1 --json >"$tmp/codec" 2>"$tmp/err"
check "codec exits 0" test $? -eq 0
check "codec: 8 densities x 4 encodings" test "$(wc -l <"$tmp/codec")" -eq 32
check "codec: every round trip" test "$(grep -c '"round_trip":true' "$tmp/codec")" -eq 32
coo=$(grep '"density":0.01,"encoding":"coo"' "$tmp/codec")
check "codec: coo at 1% is under 5% of dense" lt "$(field "$coo" size_fraction)" 0.05
"$loom" sync codec --bucket-mib 0 >/dev/null 2>&1
check "codec: empty bucket exits 1" test $? -eq 1

# ---- loopback: always
"$loom" sync bench "${small[@]}" --link loopback --json >"$tmp/out" 2>"$tmp/err"
check "loopback bench exits 0" test $? -eq 0
check "one line per plan" test "$(wc -l <"$tmp/out")" -eq 3
flat=$(grep '"plan":"flat"' "$tmp/out")
topo=$(grep '"plan":"topo"' "$tmp/out")
sparse=$(grep '"plan":"topo+sparse"' "$tmp/out")
for l in "$flat" "$topo" "$sparse"; do
        check "verified: ${l:0:30}" test "$(field "$l" verified)" = true
        for k in plan wall_s slow_link_bytes slow_link_copies fast_link_bytes goodput_fraction \
                encode_gbps decode_gbps verified; do
                check "field $k" grep -q "\"$k\":" <<<"$l"
        done
done
check "flat: 8 copies on the slow link" lt 7.99 "$(field "$flat" slow_link_copies)"
check "topo: one copy on the slow link" lt "$(field "$topo" slow_link_copies)" 1.05
check "topo: at least one copy" lt 0.999 "$(field "$topo" slow_link_copies)"
check "topo+sparse: a fraction of a copy" lt "$(field "$sparse" slow_link_copies)" 0.2
check "unshaped: goodput null" test "$(field "$topo" goodput_fraction)" = null

"$loom" sync bench "${small[@]}" --link loopback --plan topo+sparse --late 3 --json >"$tmp/out"
check "late joiners: exit 0" test $? -eq 0
check "late joiners verified" grep -q '"verified":true' "$tmp/out"
check "late joiners caught up" grep -q '"ranks_ok":8' "$tmp/out"

"$loom" sync bench "${small[@]}" --link loopback --plan topo --corrupt wire --json >"$tmp/out" 2>/dev/null
check "corrupt bucket: exit 1" test $? -eq 1
check "corrupt bucket: not verified" grep -q '"verified":false' "$tmp/out"
check "corrupt bucket: every rank intact" grep -q '"ranks_intact":8' "$tmp/out"

"$loom" sync plan --model qwen2.5-1.5b >"$tmp/plan"
check "plan exits 0" test $? -eq 0
check "plan: flat 8 copies" grep -q 'flat .*(8.00 copies)' "$tmp/plan"
check "plan: topo 1 copy" grep -q 'topo .*(1.00 copies)' "$tmp/plan"
"$loom" sync plan --model qwen2.5-1.5b --json >"$tmp/pieces"
check "shard map: one line per piece" test "$(wc -l <"$tmp/pieces")" -eq "$(sed -n 's/.*; \([0-9]*\) pieces$/\1/p' "$tmp/plan")"
check "shard map: row-parallel pieces are strided" grep -q '"tensor":"model.layers.0.self_attn.o_proj.weight","rows":\[0,384\],"cols":\[0,768\].*"length":1536,"count":384,"stride":3072' "$tmp/pieces"
check "plan is deterministic" test "$("$loom" sync plan --model qwen2.5-1.5b)" = "$(cat "$tmp/plan")"

# ---- bad input: exit 1, message names the option; bad usage: exit 2
"$loom" sync bench --model gpt-9 >"$tmp/out" 2>"$tmp/err"
check "unknown model exits 1" test $? -eq 1
check "unknown model named" grep -q "model" "$tmp/err"
check "nothing printed on bad input" test ! -s "$tmp/out"
"$loom" sync bench --model tiny --train tp=3 2>"$tmp/err" >/dev/null
check "bad tp exits 1" test $? -eq 1
check "bad tp names --train" grep -q -- "--train" "$tmp/err"
"$loom" sync bench --model tiny --density 2 2>"$tmp/err" >/dev/null
check "bad density exits 1" test $? -eq 1
"$loom" sync bench --model tiny --rollout tp=1,pp=2 2>"$tmp/err" >/dev/null
check "rollout pp exits 1" test $? -eq 1
"$loom" sync bench --bogus 1 2>/dev/null >/dev/null
check "unknown option exits 2" test $? -eq 2
"$loom" sync frobnicate 2>/dev/null >/dev/null
check "unknown subcommand exits 2" test $? -eq 2
"$loom" sync bench --help >"$tmp/out"
check "--help exits 0" test $? -eq 0
check "--help documents --plan" grep -q -- "--plan" "$tmp/out"

echo "sync_cli: $pass passed, $fail failed"
test "$fail" -eq 0
