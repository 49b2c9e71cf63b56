#!/usr/bin/env bash
# Live rollout weights (`loom harvest publish` -> `loom harvest node --weights`): bytes moved per
# version against a dense copy at the publisher's density, and the node's pull + apply time per
# version (request, transfer over loopback TCP, CRC and shard-hash checks, swap) for the default
# 4 Mi-element (8 MiB) buffer, plus the catch-up after 3 missed versions (one pull of the delta
# chain). Byte counts are exact; times are best and median over the versions of one run on a
# shared machine. Never fails on timing. $1: build folder.
set -uo pipefail
b=${1:-build}
loom="$b/loom"
n=${LOOM_HARVEST_WEIGHTS_VERSIONS:-8}
tmp=$(mktemp -d)
pids=()
cleanup() {
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
        rm -rf "$tmp"
}
trap cleanup EXIT
field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"; }
get() {
        local line
        exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
        printf 'GET %s HTTP/1.0\r\n\r\n' "$1" >&3
        while IFS= read -r line <&3; do case $line in "{"*) printf '%s\n' "$line" ;; esac; done
        exec 3<&-
}
listen() { # file prefix -> port
        for _ in $(seq 200); do
                p=$(sed -n "s/^$2 on 127.0.0.1:\([0-9]*\)$/\1/p" "$1")
                [ -n "$p" ] && { echo "$p"; return 0; }
                sleep 0.05
        done
        return 1
}
stat_of() { # values... -> "best median"
        printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { printf "%s %s", a[1], a[int((NR + 1) / 2)] }'
}

for density in 0.001 0.01 0.1; do
        : >"$tmp/pub"  # truncated before the launch: the last round's port must not be read
        : >"$tmp/node"
        "$loom" harvest publish --interval-s 0.3 --density "$density" >"$tmp/pub" 2>&1 &
        pids+=($!)
        wport=$(listen "$tmp/pub" publishing)
        "$loom" harvest node --rollouts 0 --weights "$wport" --weights-poll-ms 50 >"$tmp/node" 2>&1 &
        pids+=($!)
        port=$(listen "$tmp/node" listening)
        ms=() ratio= last=0
        for _ in $(seq 600); do
                st=$(get /v1/weights)
                v=$(field "$st" version)
                if [ "$v" -gt "$last" ] && [ "$(field "$st" pulls_delta)" -ge 1 ] && [ "$v" -gt 1 ]; then
                        pub=$(grep "^{\"version\":$v," "$tmp/pub")
                        ms+=("$(field "$st" last_pull_ms)")
                        ratio=$(awk -v a="$(field "$st" last_bytes)" -v b="$(field "$pub" dense_bytes)" \
                                'BEGIN { printf "%.4f", a / b }')
                        bytes=$(field "$st" last_bytes)
                        dense=$(field "$pub" dense_bytes)
                        [ "${#ms[@]}" -ge "$n" ] && break
                fi
                last=$v
                sleep 0.02
        done
        read -r best med <<<"$(stat_of "${ms[@]}")"
        echo "density $density: delta $bytes B vs dense $dense B per version (ratio $ratio);" \
                "pull+apply best $best ms, median $med ms over ${#ms[@]} versions"
        if [ "$density" = 0.01 ]; then
                get "/v1/weights?hold=1" >/dev/null
                h=$(field "$(get /v1/weights)" version)
                for _ in $(seq 200); do
                        [ "$(field "$(get /v1/weights)" policy_version)" -ge $((h + 3)) ] && break
                        sleep 0.05
                done
                st=$(get /v1/weights)
                n0=$(($(field "$st" pulls_dense) + $(field "$st" pulls_delta)))
                get "/v1/weights?hold=0" >/dev/null
                for _ in $(seq 200); do
                        st=$(get /v1/weights)
                        [ "$(($(field "$st" pulls_dense) + $(field "$st" pulls_delta)))" -gt "$n0" ] && break
                        sleep 0.02
                done
                kind=delta-chain
                [ "$(field "$st" pulls_dense)" -gt 1 ] && kind=dense
                echo "density $density: catch-up from version $h to $(field "$st" version)" \
                        "($kind): $(field "$st" last_bytes) B vs dense $dense B in $(field "$st" last_pull_ms) ms"
        fi
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
        pids=()
done
