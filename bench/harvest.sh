#!/usr/bin/env bash
# ROSE (`loom harvest`): the simulator at the paper's rollout size (batch 256 prompts x group 16
# = 4,096 trajectories per step) against the paper's numbers, its speed and how it grows with
# the rollout size, serving SLOs on the bundled trace and on synthetic bursts (with and without
# latency-model error), routing decision latency, and a live node driven by `loom harvest
# replay`. GPU time is simulated from the latency models (docs/harvest.md); simulator speed is
# given in CPU seconds too (bash's `time`), as wall time on a shared machine is not its own. Targets: the whole 1-hour trace at 256 x 16 with every policy
# in under 10 s; time linear in trajectories; routing decisions <= 50 us; serving P99 TTFT /
# TPOT within 500 / 150 ms, also on the Azure code trace (traces/azure/llm-2023-code.csv), which
# nothing was tuned on. Prints text and JSON lines; never fails on timing.
# $1: build folder. Run from the source tree (the traces are traces/azure/llm-2023-{conv,code}.csv).
set -uo pipefail
b=${1:-build}
loom="$b/loom"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {
        echo "\$ loom $*"
        "$loom" "$@" || echo "(exit $?)"
}
num() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" <<<"$2"; }
short() { # a JSON line -> the figures the tables use
        local l=$1
        printf '%-10s traj/step %5s rollout %7.1f s  speedup %5.3f  TTFT p99 %6.1f  TPOT p99 %6.1f  ITL p99 %6.1f ms  affinity %6s/%-6s turns  wall %5.2f s\n' \
                "$(sed -n 's/.*"policy":"\([a-z0-9-]*\)".*/\1/p' <<<"$l")" "$(num trajectories_per_step "$l")" \
                "$(num rollout_s "$l")" "$(num speedup_vs_roll "$l")" "$(num ttft_p99_ms "$l")" \
                "$(num tpot_p99_ms "$l")" "$(num itl_p99_ms "$l")" "$(num affinity_hits "$l")" \
                "$(num turns "$l")" "$(num wall_s "$l")"
}

echo "== simulator speed: the whole 1-hour trace at 256 x 16, RL steps back to back until it ends"
echo "   (wall is CPU time on an idle machine; on a shared one compare the CPU seconds)"
TIMEFORMAT="every policy in one process: %R s wall, %U s user CPU (target < 10 s)"
time "$loom" harvest sim --policy all --steps 0 --json >"$tmp/all.json"
while read -r line; do
        echo "$(sed -n 's/.*"policy":"\([a-z0-9-]*\)".*/\1/p' <<<"$line"): $(num wall_s "$line") s wall" \
                "($(num sim_s "$line") s simulated, $(num turns "$line") turns)"
done <"$tmp/all.json"
keep=$(grep '"policy":"rose"' "$tmp/all.json")
echo "routing decisions (rose): mean $(num route_us_mean "$keep") us, p99 $(num route_us_p99 "$keep") us," \
        "max $(num route_us_max "$keep") us over $(num turns "$keep") routed turns (target <= 50 us)"

echo
echo "== growth with the rollout size: rose, --steps 2, 1x / 4x / 16x trajectories (CPU seconds)"
for bt in 16 64 256; do
        TIMEFORMAT="%U"
        cpu=$({ time "$loom" harvest sim --policy rose --steps 2 --batch "$bt" --json >"$tmp/g.json"; } 2>&1)
        line=$(head -1 "$tmp/g.json")
        turns=$(num turns "$line")
        echo "batch $bt x 16 = $(num trajectories_per_step "$line") trajectories/step: $cpu s CPU (rose and roll)," \
                "$turns rose turns, $(awk -v w="$cpu" -v t="$turns" 'BEGIN { printf "%.1f", w * 1e6 / t }') us per turn"
done

echo
echo "== every policy at 256 x 16, 7b pair, density 1, 16 of 16 serving GPUs borrowed, 1-hour trace"
run harvest sim --policy all --steps 0

echo
echo "== speedup over roll with 4 / 8 / 16 borrowed GPUs at 256 x 16 (paper: 1.26x / 1.45x / 1.69x),"
echo "   on the bundled conversation trace, on synthetic bursts (bench/harvest_bursts.py) and on the"
echo "   code trace, with latency-model error 0 and 10% (--noise): rose (sound admission + guard),"
echo "   eq12 (the plain Eq. 1-2) and pinned (no turn-wise routing)"
python3 bench/harvest_bursts.py traces/azure/llm-2023-conv.csv "$tmp"
for tr in traces/azure/llm-2023-conv.csv "$tmp/step.csv" "$tmp/spikes.csv" traces/azure/llm-2023-code.csv; do
        for nz in 0 0.1; do
                for k in 4 8 16; do
                        "$loom" harvest sim --trace "$tr" --policy rose,eq12,pinned --borrow "$k" --steps 0 \
                                --noise "$nz" --json | grep -v '"policy":"roll"' |
                                while read -r l; do echo "$(basename "$tr") noise $nz borrow $k: $(short "$l")"; done
                done
        done
done

echo
echo "== routing ablation (paper Table 3: turn-wise routing and KV-cache affinity, up to 1.48x):"
echo "   pinned / turnwise (no affinity) / rose, 256 x 16, 16 borrowed"
for tr in traces/azure/llm-2023-conv.csv "$tmp/step.csv" "$tmp/spikes.csv" traces/azure/llm-2023-code.csv; do
        "$loom" harvest sim --trace "$tr" --policy pinned,turnwise,rose --steps 0 --json |
                grep -v '"policy":"roll"' | while read -r l; do echo "$(basename "$tr"): $(short "$l")"; done
done
for bt in 16 32 64; do
        "$loom" harvest sim --policy pinned,rose --steps 0 --batch "$bt" --json |
                grep -v '"policy":"roll"' | while read -r l; do echo "batch $bt x 16: $(short "$l")"; done
done

echo
echo "== serving density (paper Table 5), 256 x 16"
for d in 1 2 4; do
        run harvest sim --policy rose,static,preempt --density "$d" --steps 0
done

echo
echo "== 32b pair (TP4 instances), 256 x 16"
run harvest sim --pair 32b --policy rose,roll,static,prism,ttft-only,tpot-only --steps 3

echo
echo "== live node (one colocated GPU, speed 10): a quarter of the trace (--density 0.25, 120"
echo "   emulated s), then 80 isolated requests (1 s apart, 1000 tokens in, 2 out) with iterations"
echo "   10% off the model (--noise 0.1). node_*: each request on the node's clock from accepting"
echo "   it (what the admission controls; host_*: the host's delays inside those); ttft/tpot_*: the"
echo "   client's, with loopback, HTTP and its threads. SLOs 500 / 150 ms."
printf 'TIMESTAMP,ContextTokens,GeneratedTokens\n' >"$tmp/isolated.csv"
for i in $(seq 0 79); do echo "$i,1000,2"; done >>"$tmp/isolated.csv"
live() { # replay-args, node-args...
        local targs=$1 out pid port=
        shift
        out=$(mktemp)
        "$loom" harvest node --speed 10 "$@" >"$out" &
        pid=$!
        for _ in $(seq 100); do
                port=$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$out")
                [ -n "$port" ] && break
                sleep 0.05
        done
        echo "node $*, replay $targs:"
        # shellcheck disable=SC2086
        "$loom" harvest replay --port "$port" --speed 10 $targs --json
        exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'GET /v1/stats HTTP/1.0\r\n\r\n' >&3 &&
                grep '^{' <&3
        exec 3<&-
        kill "$pid"
        wait "$pid" 2>/dev/null
        rm -f "$out"
}
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for a in "--rollouts 16" "--rollouts 16 --admit eq12" "--rollouts 0"; do
        # shellcheck disable=SC2086
        live "--density 0.25 --duration-s 120" $a
done
for a in "--admit dual" "--admit eq12"; do
        # shellcheck disable=SC2086
        live "--trace $tmp/isolated.csv --duration-s 100" --rollouts 16 --noise 0.1 $a
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
