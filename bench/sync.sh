#!/usr/bin/env bash
# Weight transfer engine: codec speed by density, plan volumes for Qwen2.5-1.5B, and real
# multi-process transfers (flat, topo, topo+sparse) over a tc-shaped veth between two network
# namespaces when run as root, otherwise over unshaped loopback (the program says which).
# Targets: topo puts 1.00 model copies on the slow link; goodput >= 90% of the shaped rate;
# topo+sparse >= 4x faster than topo at 1% density and 5 Gbit/s; codec >= 1 GB/s per core.
# Every rank is one process; on a small machine they share its cores, so wall times are an
# upper bound of what separate hosts would see. Memory: rollout ranks hold their slice twice
# while a dense version is staged, so the full-size runs need several GB per rollout rank; the
# CLI refuses runs that would not fit and this script then goes on with the next one.
# $1: build folder. Prints text and JSON lines; never fails on timing.
set -uo pipefail
b=${1:-build}
loom="$b/loom"
repeat=${LOOM_SYNC_REPEAT:-1} # best of N runs per plan; the docs figures use 2
run() {
        echo "\$ loom $*"
        "$loom" "$@" || echo "(exit $?)"
}

run sync codec --bucket-mib 64
run sync plan --model qwen2.5-1.5b --train tp=2,pp=1,dp=4 --rollout tp=1,dp=8
# The reference configuration at full Qwen2.5-0.5B size.
run sync bench --model qwen2.5-0.5b --train tp=2,pp=1,dp=4 --rollout tp=1,dp=8 \
        --link-gbps 5 --density 0.01 --plan all --repeat "$repeat" --json
# Qwen2.5-1.5B shapes (embedding, head, per-layer matrices) with 4 of its 28 layers, so that
# eight full rollout copies fit in memory.
run sync bench --model qwen2.5-1.5b --layers 4 --train tp=2,pp=1,dp=4 --rollout tp=1,dp=8 \
        --link-gbps 5 --density 0.01 --plan all --repeat "$repeat" --json
# Goodput at a rate this machine's CPUs can drive through the veth pair.
run sync bench --model qwen2.5-0.5b --layers 8 --link-gbps 1 --density 0.01 --plan flat --repeat "$repeat" --json
run sync bench --model qwen2.5-0.5b --layers 8 --link-gbps 1 --density 0.01 --plan topo --repeat "$repeat" --json
# Goodput at 5 Gbit/s with as many ranks as two cores can drive (2 training, 2 rollout).
run sync bench --model qwen2.5-0.5b --layers 8 --train tp=1,pp=1,dp=2 --rollout tp=1,dp=2 \
        --link-gbps 5 --density 0.01 --plan flat --repeat "$repeat" --json
run sync bench --model qwen2.5-0.5b --layers 8 --train tp=1,pp=1,dp=2 --rollout tp=1,dp=2 \
        --link-gbps 5 --density 0.01 --plan topo --repeat "$repeat" --json
# Late joiners: two rollout ranks start after the step and catch up from their peers' relays.
run sync bench --model qwen2.5-0.5b --layers 4 --link-gbps 5 --density 0.01 --plan topo+sparse \
        --late 2 --json
exit 0
