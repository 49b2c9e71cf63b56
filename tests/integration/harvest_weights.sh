#!/usr/bin/env bash
# `loom harvest publish` + `loom harvest node --weights` end to end over loopback: the node's
# rollout weights equal the publisher's bit for bit (hash and CRC32C) after each version, pulled
# as sparse deltas; with pulls held across 3+ versions the node knows it is stale, the router
# sends it no rollout turns while serving requests are all answered, and on release it catches
# up with one pull of the chain of deltas it missed and takes turns again; the same after the
# whole node was frozen (SIGSTOP). Also a shape or model mismatch is reported and nothing
# applied, bad input exits 1, bad usage 2.
# $1 build dir, $2 source dir.
set -u
b=$1
loom="$b/loom"
tmp=$(mktemp -d)
node_pid= pub_pid=
fail=0 pass=0
cleanup() {
        if [ -n "$node_pid" ] && ! kill -0 "$node_pid" 2>/dev/null; then
                wait "$node_pid"
                echo "node exited early with status $?"
                node_pid=
        fi
        [ -n "$node_pid" ] && kill -CONT "$node_pid" 2>/dev/null
        for p in $node_pid $pub_pid; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
        if [ "$fail" -gt 0 ]; then
                for f in node.out node.err pub.err pub.out; do
                        [ -s "$tmp/$f" ] && { echo "--- $f"; tail -c 3000 "$tmp/$f"; }
                done
        fi
        rm -rf "$tmp"
}
trap cleanup EXIT
. "$2/tests/integration/lib/harvest_node.sh"
# The served version once a pull that was in flight when pulls were held has landed.
settled_version() {
        local v w
        for _ in $(seq 100); do
                v=$(field "$(get /v1/weights)" version)
                sleep 0.3
                st=$(get /v1/weights)
                w=$(field "$st" version)
                [ "$v" = "$w" ] && break
        done
        echo "$w"
}
wait_for_true() { # key path: poll (up to 10 s) until key is true; the body is in $st
        for _ in $(seq 200); do
                st=$(get "$2")
                [ "$(field "$st" "$1")" = true ] && return 0
                sleep 0.05
        done
        return 1
}
pub_line() { grep "^{\"version\":$1," "$tmp/pub.out"; }
pub_latest() { field "$(grep '^{"version"' "$tmp/pub.out" | tail -1)" version; }
# The node serves the publisher's bytes of the version it claims: same hash, same CRC32C.
same_as_publisher() {
        local v p
        v=$(field "$st" version)
        p=$(pub_line "$v")
        [ "$v" -ge 1 ] && [ -n "$p" ] && [ "$(field "$st" hash)" = "$(field "$p" hash)" ] &&
                [ "$(field "$st" crc32c)" = "$(field "$p" crc32c)" ]
}
# Up to date with the publisher's newest version (which moves every interval).
caught_up() {
        for _ in $(seq 300); do
                st=$(get /v1/weights)
                [ "$(field "$st" version)" = "$(pub_latest)" ] && return 0
                sleep 0.02
        done
        return 1
}

# ---- publisher: a new version every 0.5 s, 1% of 4 Mi bf16 elements change
"$loom" harvest publish --model trainer-a --interval-s 0.5 --density 0.01 >"$tmp/pub.out" 2>"$tmp/pub.err" &
pub_pid=$!
wport=$(listen_port "$tmp/pub.out" publishing)
check "publisher starts" test -n "$wport"

# ---- a shard layout the publisher does not have: refused by name, nothing applied
start_node --speed 20 --rollouts 4 --weights "$wport" --weights-shards 3 --weights-poll-ms 50
check "mismatched node starts" test -n "$port"
check "shape mismatch reported" wait_for probes_failed 1 /v1/weights
check "error names the shapes" grep -q "shape mismatch" <<<"$st"
check "nothing applied" test "$(field "$st" version)" = 0
check "no rollouts without weights" test "$(field "$st" turns_done)" = 0
check "not routable without weights" test "$(field "$st" routable)" = false
stop_node

# ---- another model's publisher: refused by model id, nothing applied
start_node --speed 20 --rollouts 4 --weights "$wport" --weights-model trainer-b --weights-poll-ms 50
check "model-mismatch node starts" test -n "$port"
check "model mismatch reported" wait_for probes_failed 1 /v1/weights
check "error names both models" grep -q "want 'trainer-b', but this publisher serves model 'trainer-a'" <<<"$st"
check "nothing applied from another model" test "$(field "$st" version)" = 0
stop_node

# ---- follow the publisher, bit for bit, version after version
start_node --speed 20 --rollouts 8 --weights "127.0.0.1:$wport" --weights-model trainer-a --weights-poll-ms 50
check "node starts" test -n "$port"
seen=0 last=0
for _ in $(seq 3); do
        wait_for version $((last + 1)) /v1/weights
        last=$(field "$st" version)
        same_as_publisher && seen=$((seen + 1))
done
check "3 versions served bit-exact ($seen)" test "$seen" = 3
check "sparse deltas after the first pull" ge "$(field "$st" pulls_delta)" 2
check "no failed pulls" test "$(field "$st" pulls_failed)" = 0
check "rollouts run" wait_for turns_done 1
delta=$(field "$st" last_bytes)
dense=$(field "$(pub_line "$last")" dense_bytes)
check "a delta moves under 5% of dense ($delta / $dense)" test "$((delta * 20))" -lt "$dense"

# ---- hold pulls across 3 versions: stale, not routed, serving unaffected
st=$(get "/v1/weights?hold=1")
check "hold acknowledged" test "$(field "$st" held)" = true
held=$(settled_version)
dense0=$(field "$st" pulls_dense)
check "the node learns it is 3 behind" wait_for policy_version $((held + 3)) /v1/weights
check "held version still served" test "$(field "$st" version)" = "$held"
check "stale node not routable" test "$(field "$st" routable)" = false
sleep 0.3 # in-flight turns finish; no new ones start
t1=$(field "$(get /v1/stats)" turns_done)
{
        echo "TIMESTAMP,ContextTokens,GeneratedTokens"
        for i in $(seq 0 19); do printf '%d.%03d,800,20\n' 0 $((i * 50)); done
} >"$tmp/burst.csv"
"$loom" harvest replay --port "$port" --speed 20 --trace "$tmp/burst.csv" --json >"$tmp/replay" 2>&1
check "serving answered every request while stale" test "$(field "$(cat "$tmp/replay")" ok)" = 20
st=$(get /v1/stats)
check "no turns started while stale" test "$(field "$st" turns_done)" = "$t1"
check "router refused the stale node" ge "$(field "$st" route_stale)" 1

# ---- release: catch-up to the latest through the delta chain, routable again
get "/v1/weights?hold=0" >/dev/null
check "caught up after the hold" caught_up
check "catch-up bit-exact" same_as_publisher
dense_b=$(field "$(pub_line "$(field "$st" version)")" dense_bytes)
check "catch-up was one delta chain, not dense" test "$(field "$st" pulls_dense)" = "$dense0"
check "the chain moved under a quarter of dense ($(field "$st" last_bytes) / $dense_b)" \
        test "$(($(field "$st" last_bytes) * 4))" -lt "$dense_b"
check "routable again" wait_for_true routable /v1/weights
check "rollouts resume" wait_for turns_done $((t1 + 1))

# ---- freeze the whole node across 3 versions (a partition), then thaw
v0=$(pub_latest)
kill -STOP "$node_pid"
for _ in $(seq 100); do [ "$(pub_latest)" -ge $((v0 + 3)) ] && break; sleep 0.05; done
kill -CONT "$node_pid"
check "caught up after SIGSTOP" caught_up
check "thawed catch-up bit-exact" same_as_publisher
check "no failed pulls overall" test "$(field "$st" pulls_failed)" = 0
tagged() { # rollout turns were done under the version now served
        for _ in $(seq 300); do
                st=$(get /v1/stats)
                grep -q "\"turns_by_version\":{.*\"$(field "$st" version)\":" <<<"$st" && return 0
                sleep 0.05
        done
        return 1
}
check "rollouts tagged with the version they ran under" tagged
stop_node
check "node stops cleanly with weights" test $? -eq 0
check "node prints its weights" grep -q '"weights":{"version":' "$tmp/node.out"

# ---- staleness allowance, against the publisher's own log: with --staleness 6 and pulls held
# at version h, turns must go on under h while the publisher is at most 6 versions ahead of h
# and stop once it is 7 or more ahead (the versions come from pub.out, not from the node)
start_node --speed 20 --rollouts 8 --weights "$wport" --weights-poll-ms 50 --staleness 6
check "allowance node follows" wait_for version 1 /v1/weights
get "/v1/weights?hold=1" >/dev/null
h=$(settled_version)
done_under() { # turns done under version h, from turns_by_version
        local n
        n=$(sed -n "s/.*\"turns_by_version\":{[^}]*\"$h\":\([0-9]*\).*/\1/p" <<<"$(get /v1/stats)")
        echo "${n:-0}"
}
for _ in $(seq 200); do [ "$(pub_latest)" -ge $((h + 2)) ] && break; sleep 0.02; done
a=$(done_under) grew=0 ahead=0
while :; do # until turns under h grow, or the publisher leaves the allowance
        ahead=$(($(pub_latest) - h))
        [ "$(done_under)" -gt "$a" ] && { grew=1; break; }
        [ "$ahead" -gt 6 ] && break
        sleep 0.05
done
check "within the allowance (2-6 ahead, saw $ahead): turns go on under version $h" test "$grew" = 1
for _ in $(seq 300); do [ "$(pub_latest)" -ge $((h + 7)) ] && break; sleep 0.02; done
wait_for policy_version $((h + 7)) /v1/weights
sleep 0.5 # turns started before finish
a=$(done_under)
sleep 0.5
check "past the allowance ($(($(pub_latest) - h)) ahead): no turns under version $h" \
        test "$(done_under)" = "$a"
check "and the router says so" test "$(field "$(get /v1/stats)" routable)" = false
stop_node

# ---- bad input and usage
"$loom" harvest node --weights nowhere >/dev/null 2>"$tmp/err"
check "node --weights bad address exits 1" test $? -eq 1
check "error names --weights" grep -q -- "--weights" "$tmp/err"
"$loom" harvest node --weights 1 --weights-elems 0 >/dev/null 2>&1
check "node --weights-elems 0 exits 1" test $? -eq 1
"$loom" harvest publish --density 2 >/dev/null 2>&1
check "publish --density 2 exits 1" test $? -eq 1
"$loom" harvest publish --bogus 1 >/dev/null 2>&1
check "publish unknown option exits 2" test $? -eq 2
"$loom" harvest publish --help | grep -q -- "--interval-s"
check "publish --help" test $? -eq 0
"$loom" harvest node --help | grep -q -- "--weights"
check "node --help lists --weights" test $? -eq 0

echo "publisher: $(pub_line "$last")"
echo "harvest_weights: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
