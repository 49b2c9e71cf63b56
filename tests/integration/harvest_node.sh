#!/usr/bin/env bash
# `loom harvest node` + `loom harvest replay` end to end over loopback: a serving burst lands on
# a node whose rollouts fill its KV budget, the emergency cut fires, rollout requests are
# aborted and rerouted, and every serving request still completes. Also: the simulator's CLI,
# bad input exits 1, bad usage 2, --help 0.
# $1 build dir, $2 source dir.
set -u
b=$1
src=$2
loom="$b/loom"
tmp=$(mktemp -d)
node_pid=
fail=0 pass=0
cleanup() {
        if [ -n "$node_pid" ]; then kill "$node_pid" 2>/dev/null; wait "$node_pid" 2>/dev/null; fi
        if [ "$fail" -gt 0 ] && [ -s "$tmp/node.err" ]; then
                echo "--- node stderr:"
                head -c 4000 "$tmp/node.err"
        fi
        rm -rf "$tmp"
}
trap cleanup EXIT
. "$src/tests/integration/lib/harvest_node.sh"

# a burst: 40 requests within one emulated second, 1000-token prompts, 40 tokens each
{
        echo "TIMESTAMP,ContextTokens,GeneratedTokens"
        for i in $(seq 0 39); do printf '%d.%03d,1000,40\n' 0 $((i * 25)); done
} >"$tmp/burst.csv"

node_args=(--speed 20 --pages 600 --headroom-pages 200 --turn-prompt 2000 --turn-resp 400)

# ---- with rollouts: the burst forces the emergency cut, nothing is lost; RL steps every 5
# emulated s (0.25 s wall) derive the budget again and release the cut, so a second burst
# 10 emulated s later cuts again
start_node "${node_args[@]}" --rollouts 16 --step-s 5
check "node starts" test -n "$port"
check "rollouts hold pages before the burst" wait_for pool_rollout 300
"$loom" harvest replay --port "$port" --speed 20 --trace "$tmp/burst.csv" --json >"$tmp/with" 2>"$tmp/err"
check "replay exits 0" test $? -eq 0
with=$(cat "$tmp/with")
check "every request answered" test "$(field "$with" ok)" = 40
check "no request failed" test "$(field "$with" failed)" = 0
after=$(get /v1/stats)
check "emergency cut fired" ge "$(field "$after" cuts)" 1
check "rollout requests aborted" ge "$(field "$after" turns_aborted)" 1
check "budget halved (or derived again below that by a later step)" ge 200 "$(field "$after" budget)"
check "rollouts continue after the cut" wait_for turns_done "$(($(field "$after" turns_done) + 1))"
check "RL steps run on the node" wait_for rl_steps "$(($(field "$after" rl_steps) + 2))"
check "rollouts refill the new budget" wait_for pool_rollout 150
sleep 0.5 # 10 emulated seconds after the first burst
"$loom" harvest replay --port "$port" --speed 20 --trace "$tmp/burst.csv" --json >"$tmp/with2" 2>"$tmp/err"
check "second burst all answered" test "$(field "$(cat "$tmp/with2")" ok)" = 40
after2=$(get /v1/stats)
check "the second burst cuts again ($(field "$after" cuts) -> $(field "$after2" cuts))" \
        ge "$(field "$after2" cuts)" "$(($(field "$after" cuts) + 1))"
check "rollout requests aborted again" ge "$(field "$after2" turns_aborted)" "$(($(field "$after" turns_aborted) + 1))"
# ---- request sizes: what the node can never serve is refused, and nothing wedges
check "oversized context refused with 422" grep -q '^422 prompt + gen' <<<"$(status '/v1/generate?prompt=1000000&gen=1000000')"
check "KV beyond the pool refused with 413" grep -q '^413 prompt + gen' <<<"$(status '/v1/generate?prompt=30000&gen=1000')"
printf 'TIMESTAMP,ContextTokens,GeneratedTokens\n0,1000,20\n0.1,500,20\n' >"$tmp/two.csv"
"$loom" harvest replay --port "$port" --speed 20 --trace "$tmp/two.csv" --json >"$tmp/two" 2>"$tmp/err"
check "requests after refused ones complete" test "$(field "$(cat "$tmp/two")" ok)" = 2
stop_node
check "node stops cleanly on SIGTERM" test $? -eq 0
check "node prints its statistics" grep -q '"served":82' "$tmp/node.out"

# ---- without rollouts: the same burst, for comparison
start_node "${node_args[@]}" --rollouts 0
"$loom" harvest replay --port "$port" --speed 20 --trace "$tmp/burst.csv" --json >"$tmp/without"
check "replay without rollouts exits 0" test $? -eq 0
without=$(cat "$tmp/without")
check "nothing aborted without rollouts" test "$(field "$(get /v1/stats)" turns_aborted)" = 0
stop_node
echo "with rollouts:    $with"
echo "without rollouts: $without"

# ---- serving latency, on the node's own clock: each request's TTFT and TPOT from the moment the
# node accepted it, what the admission controls and the figures the SLOs (500 ms TTFT, 150 ms
# TPOT) are asserted on. The client's figures (loopback, HTTP, its threads' scheduling on a
# loaded host) are printed beside, not asserted.
lat_run() { # out-name trace-args node-args...: a node at speed 10, one replay; $lat, $lat_stats
        local name=$1 targs=$2
        shift 2
        start_node --speed 10 "$@"
        # shellcheck disable=SC2086
        (cd "$src" && "$loom" harvest replay --port "$port" --speed 10 $targs --json) >"$tmp/$name" 2>"$tmp/err"
        lat=$(cat "$tmp/$name")
        lat_stats=$(get /v1/stats)
        stop_node
        check "$name: every request answered, with the node's figures" \
                test "$(field "$lat" failed)" = 0 -a "$(field "$lat" node_figures)" = "$(field "$lat" ok)"
        # per request the node's window lies inside the client's, so its P99 does too
        check "$name: node P99 TTFT within the client's" \
                ge "$(awk -v c="$(field "$lat" ttft_p99_ms)" 'BEGIN { print c + 0.02 }')" "$(field "$lat" node_ttft_p99_ms)"
        echo "$name: node P99 TTFT $(field "$lat" node_ttft_p99_ms) TPOT $(field "$lat" node_tpot_p99_ms) ms" \
                "(lost to the host: $(field "$lat" host_ttft_p99_ms) / $(field "$lat" host_tpot_p99_ms));" \
                "client $(field "$lat" ttft_p99_ms) / $(field "$lat" tpot_p99_ms) ms;" \
                "$(field "$lat_stats" turns_done) rollout turns"
}
within() { awk -v t="$1" -v p="$2" 'BEGIN { exit !(t > 0 && t <= 500 && p > 0 && p <= 150) }'; }
over() { awk -v t="$1" -v p="$2" 'BEGIN { exit !(t > 500 || p > 150) }'; }
# rose's SLOs on the node's figures in $lat, $lat_stats. When the P99 request is over an SLO
# by less than it lost to the host and the host held the executor up for over 100 emulated ms
# at once in that run (10 ms wall at speed 10: descheduled for a scheduler slice or more, which
# no admission plans for; the small overshoot of every sleep, which the admission does see and
# must absorb, stays far below: 24-52 ms on a quiet host), the host was too loaded for the
# check and that is said instead. Any other miss is run once more (the suite's other tests
# share the two cores), and only a second miss fails: a broken admission misses every time.
rose_miss() { # 0 when rose's figures in $lat miss the SLOs for a reason the host does not excuse
        local t p ht hp
        t=$(field "$lat" node_ttft_p99_ms) p=$(field "$lat" node_tpot_p99_ms)
        ht=$(field "$lat" host_ttft_p99_ms) hp=$(field "$lat" host_tpot_p99_ms)
        if within "$t" "$p"; then
                return 1
        elif ge "$(field "$lat_stats" host_lag_max_ms)" 100 &&
                within "$(awk -v a="$t" -v b="$ht" 'BEGIN { print a - b }')" \
                        "$(awk -v a="$p" -v b="$hp" 'BEGIN { print a - b }')"; then
                echo "NOTE: host too loaded for rose's SLO check: P99 TTFT $t / TPOT $p ms on" \
                        "the node's clock, of which the host took $ht / $hp; it held the executor" \
                        "up for $(field "$lat_stats" host_lag_max_ms) ms at once"
                return 1
        fi
        return 0
}
rose_case() { # what out-name trace-args node-args...: rose's run, its SLO check, one retry
        local what=$1 miss
        shift
        lat_run "$@"
        [ $loaded = 1 ] && return
        rose_miss && miss=0 || miss=1
        if [ $miss = 0 ]; then
                echo "NOTE: rose missed on the node's clock ($what: P99 TTFT" \
                        "$(field "$lat" node_ttft_p99_ms) / TPOT $(field "$lat" node_tpot_p99_ms) ms," \
                        "the host took $(field "$lat" host_ttft_p99_ms) / $(field "$lat" host_tpot_p99_ms));" \
                        "running it once more"
                lat_run "$@"
                rose_miss && miss=0 || miss=1
        fi
        # miss = 0: over an SLO on both runs, with no host stall to excuse it
        check "rose: node P99 TTFT <= 500 ms and TPOT <= 150 ms ($what)" test $miss = 1
}
quarter="--density 0.25 --duration-s 60"

# serving alone first: if it already misses an SLO on the node's clock, the host is too loaded
# for the executor to keep time and no admission can be judged here
lat_run alone "$quarter" --rollouts 0
alone=$lat
loaded=0
if ! within "$(field "$alone" node_ttft_p99_ms)" "$(field "$alone" node_tpot_p99_ms)"; then
        loaded=1
        echo "NOTE: host too loaded for the SLO checks: serving alone, no rollouts, already gives" \
                "P99 TTFT $(field "$alone" node_ttft_p99_ms) / TPOT $(field "$alone" node_tpot_p99_ms) ms" \
                "on the node's clock; rose's SLO checks are not made this run"
fi

# a quarter of the bundled trace with 16 rollouts in flight (RL steps every 30 emulated s)
rose_case "quarter trace" rose "$quarter" --rollouts 16
rose=$lat
check "rollouts ran beside serving" ge "$(field "$lat_stats" turns_done)" 50

# The check can fail: requests arriving one by one at a GPU busy with rollouts (no decode
# running, so only TTFT binds and an admission may spend all of it), iterations 10% off the
# latency model (--noise, as `harvest sim --noise`). The plain Eq. 1-2 spends the slack to the
# microsecond and misses; rose's allowance for model error, arrival reserve and guard hold.
{
        echo "TIMESTAMP,ContextTokens,GeneratedTokens"
        for i in $(seq 0 79); do echo "$i,1000,2"; done
} >"$tmp/isolated.csv"
isolated="--trace $tmp/isolated.csv --duration-s 100"
lat_run eq12-isolated "$isolated" --rollouts 16 --noise 0.1 --admit eq12
eq12=$lat
check "eq12 is caught: node P99 TTFT above 500 ms or TPOT above 150 ms on isolated requests" \
        over "$(field "$eq12" node_ttft_p99_ms)" "$(field "$eq12" node_tpot_p99_ms)"
rose_case "isolated requests" rose-isolated "$isolated" --rollouts 16 --noise 0.1
echo "quarter trace, serving alone:   $alone"
echo "quarter trace, 16 rollouts:     $rose"
echo "isolated requests, eq12:        $eq12"
echo "isolated requests, rose:        $lat"

# ---- bad input and usage
"$loom" harvest node --speed 0 >/dev/null 2>&1
check "node --speed 0 exits 1" test $? -eq 1
"$loom" harvest node --bogus 1 >/dev/null 2>&1
check "node unknown option exits 2" test $? -eq 2
"$loom" harvest replay --speed 2 >/dev/null 2>&1
check "replay without --port exits 2" test $? -eq 2
printf 'TIMESTAMP,ContextTokens,GeneratedTokens\n0.5,10,2\n0.7,ten,2\n' >"$tmp/bad.csv"
"$loom" harvest sim --trace "$tmp/bad.csv" 2>"$tmp/err"
check "sim bad trace exits 1" test $? -eq 1
check "error names file:line:column" grep -q "bad.csv:3:5: ContextTokens" "$tmp/err"
"$loom" harvest sim --policy nope 2>/dev/null
check "sim unknown policy exits 1" test $? -eq 1
"$loom" harvest sim --steps 2>/dev/null
check "sim missing value exits 2" test $? -eq 2
"$loom" harvest --help >/dev/null
check "harvest --help exits 0" test $? -eq 0
for c in sim node replay; do
        "$loom" harvest $c --help >/dev/null
        check "$c --help exits 0" test $? -eq 0
done

# ---- the simulator's JSON keys
(cd "$src" && "$loom" harvest sim --policy rose --duration-s 900 --steps 1 --batch 32 --json) >"$tmp/sim" 2>"$tmp/err"
check "sim exits 0" test $? -eq 0
line=$(grep '"policy":"rose"' "$tmp/sim")
check "--batch 32 prompts x 16 samples = 512 trajectories" test "$(field "$line" trajectories_per_step)" = 512
for k in trajectories_per_step rollout_s ttft_p99_ms tpot_p99_ms serving_slo_attainment speedup_vs_roll preempted_gpu_time_frac; do
        check "sim json has $k" test -n "$(field "$line" $k)"
done

echo "harvest_node: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
