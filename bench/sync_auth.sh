#!/usr/bin/env bash
# Cost of keyed frames on the multi-process transfer: `loom sync bench` between one training
# and one rollout process over loopback (unshaped, so the run is CPU-bound and any tagging cost
# shows), topo+sparse at 1% density (sparse frames) and at 100% (the encoder sends every
# bucket dense), with and without the job's sync key. Every run forks fresh rank processes
# either way, so keyed and unkeyed runs alternate, ROUNDS times each (best of --repeat 3 per
# run), and the medians are compared. Prints figures; never fails on timing.
# $1: build folder.
set -uo pipefail
b=${1:-build}
loom="$b/loom"
rounds=${LOOM_SYNC_AUTH_ROUNDS:-5}
model=(--model qwen2.5-0.5b --layers 2 --train tp=1,pp=1,dp=1 --rollout tp=1,dp=1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(umask 077 && printf '%064x\n' 7 >"$tmp/key")
field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "loom sync bench ${model[*]} --link loopback --plan topo+sparse --repeat 3, $rounds rounds"
printf '%-8s %-6s %9s %9s %9s %11s\n' density keyed wall_s enc_GB/s dec_GB/s slow_bytes
for d in 0.01 1; do
        : >"$tmp/plain" && : >"$tmp/keyed"
        for ((i = 0; i < rounds; i++)); do
                for mode in plain keyed; do
                        k=(--unkeyed) # keyed is the default; this measures without
                        [ "$mode" = keyed ] && k=(--key-file "$tmp/key")
                        l=$("$loom" sync bench "${model[@]}" --link loopback --plan topo+sparse \
                                --density "$d" --repeat 3 --json "${k[@]}" 2>/dev/null)
                        echo "$(field "$l" wall_s) $(field "$l" encode_gbps) $(field "$l" decode_gbps) $(field "$l" slow_link_bytes) $(field "$l" verified)" >>"$tmp/$mode"
                done
        done
        for mode in plain keyed; do
                printf '%-8s %-6s %9.4f %9.2f %9.2f %11s\n' "$d" "$mode" \
                        "$(cut -d' ' -f1 "$tmp/$mode" | median)" "$(cut -d' ' -f2 "$tmp/$mode" | median)" \
                        "$(cut -d' ' -f3 "$tmp/$mode" | median)" "$(cut -d' ' -f4 "$tmp/$mode" | head -1)"
                grep -q false "$tmp/$mode" && echo "  ($mode: a run did not verify)"
        done
        awk -v a="$(cut -d' ' -f1 "$tmp/plain" | median)" -v b="$(cut -d' ' -f1 "$tmp/keyed" | median)" \
                -v d="$d" 'BEGIN { printf "density %s: keyed wall / unkeyed wall = %.3f (%+.1f%%)\n", d, b / a, 100 * (b / a - 1) }'
done
