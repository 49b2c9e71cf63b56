#!/usr/bin/env bash
# `loom harvest sim` on traffic it was not tuned on: the first 10 minutes of the Azure LLM
# inference 2023 code trace (traces/azure/llm-2023-code.csv; longer prompts than the
# conversation trace, mean 2,048 vs 1,155 tokens, and far shorter outputs, 28 vs 211), 512
# trajectories per step, 16 borrowed GPUs.
# rose keeps serving P99 TTFT <= 500 ms and P99 TPOT <= 150 ms with the latency model exact and
# 10% off (--noise 0.1) while it runs rollout turns on the serving GPUs; on the same slice a
# single-objective admission breaks the SLO it does not check, so the slice is one where
# admission decides. A second or so of simulation; the full-size figures are in
# bench/harvest.sh and docs/harvest.md.
# $1 build dir, $2 source dir.
set -euo pipefail
loom="$1/loom"
trace="$2/traces/azure/llm-2023-code.csv"
fail() {
        echo "FAIL: $*" >&2
        exit 1
}
num() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" <<<"$2"; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

[ "$(wc -l <"$trace")" -eq 8819 ] || fail "$trace: want 8,819 requests after the header"

for nz in 0 0.1; do
        out=$("$loom" harvest sim --trace "$trace" --policy rose,ttft-only,tpot-only \
                --duration-s 600 --steps 1 --batch 32 --borrow 16 --noise "$nz" --json)
        rose=$(grep '"policy":"rose"' <<<"$out") || fail "noise $nz: no rose line"
        ttft=$(num ttft_p99_ms "$rose") tpot=$(num tpot_p99_ms "$rose")
        on=$(num turns_on_serving "$rose") served=$(num served "$rose")
        echo "noise $nz: rose P99 TTFT $ttft ms, TPOT $tpot ms, $on turns on serving GPUs, $served served"
        le "$ttft" 500 || fail "noise $nz: rose P99 TTFT $ttft ms > 500"
        le "$tpot" 150 || fail "noise $nz: rose P99 TPOT $tpot ms > 150"
        [ "$on" -gt 1000 ] || fail "noise $nz: rose ran only $on turns on serving GPUs"
        [ "$served" -gt 500 ] || fail "noise $nz: only $served serving requests measured"
        t=$(grep '"policy":"ttft-only"' <<<"$out")
        p=$(grep '"policy":"tpot-only"' <<<"$out")
        le "$(num tpot_p99_ms "$t")" 150 && fail "noise $nz: ttft-only kept TPOT: the slice tests nothing"
        le "$(num ttft_p99_ms "$p")" 500 && fail "noise $nz: tpot-only kept TTFT: the slice tests nothing"
done
echo "PASS"
