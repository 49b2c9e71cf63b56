#!/usr/bin/env bash
# `loom harvest node --weights` with the job's sync key, end to end over loopback: a node with
# the key (from --weights-key-file or $LOOM_SYNC_KEY) follows a keyed publisher bit for bit; a
# node with another job's key, or none, takes nothing from it; a keyed node takes nothing from
# an impostor serving the publisher protocol without the key; unauthenticated pulls from, or
# an unauthenticated publisher on, anything but loopback are refused at start (exit 1), and a
# key file others can read is refused. (A node that should refuse to start runs under timeout:
# one that starts instead fails the test rather than hanging it.)
# $1 build dir, $2 source dir.
set -u
b=$1
loom="$b/loom"
tmp=$(mktemp -d)
node_pid= pub_pid= imp_pid=
fail=0 pass=0
cleanup() {
        for p in $node_pid $pub_pid $imp_pid; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
        if [ "$fail" -gt 0 ]; then
                for f in node.out node.err pub.err pub.out imp.err; do
                        [ -s "$tmp/$f" ] && { echo "--- $f"; tail -c 2000 "$tmp/$f"; }
                done
        fi
        rm -rf "$tmp"
}
trap cleanup EXIT
. "$2/tests/integration/lib/harvest_node.sh"
unset LOOM_SYNC_KEY
(umask 077 && printf '%064x\n' 7 >"$tmp/job.key" && printf '%064x\n' 8 >"$tmp/other.key")
job_key=$(cat "$tmp/job.key")
small=(--weights-elems 65536 --weights-poll-ms 50 --speed 20 --rollouts 0)
pub_line() { grep "^{\"version\":$1," "$tmp/pub.out"; }
# The node serves the publisher's bytes of the version it claims.
same_as_publisher() {
        local v p
        v=$(field "$st" version)
        p=$(pub_line "$v")
        [ "$v" -ge 1 ] && [ -n "$p" ] && [ "$(field "$st" hash)" = "$(field "$p" hash)" ]
}
# Refused three times over, nothing applied, and the reason is about the key.
takes_nothing() { # name
        check "$1: refused" wait_for_refusals 3
        check "$1: nothing applied" test "$(field "$st" version)" = 0
        check "$1: the error is the key's" grep -Eq '"last_error":"[^"]*(key|tag|authenticated)' <<<"$st"
}
wait_for_refusals() { # n: pulls_failed + probes_failed >= n (up to 20 s); the body in $st
        for _ in $(seq 400); do
                st=$(get /v1/weights)
                [ $(($(field "$st" pulls_failed) + $(field "$st" probes_failed))) -ge "$1" ] &&
                        return 0
                sleep 0.05
        done
        return 1
}

# ---- a keyed publisher
"$loom" harvest publish --key-file "$tmp/job.key" --elems 65536 --interval-s 0.5 \
        >"$tmp/pub.out" 2>"$tmp/pub.err" &
pub_pid=$!
wport=$(listen_port "$tmp/pub.out" publishing)
check "keyed publisher starts" test -n "$wport"
check "keyed publisher: no unauthenticated notice" test "$(grep -c 'not authenticated' "$tmp/pub.err")" -eq 0

# ---- the job's key from a file: versions applied bit for bit, and the node says it is keyed
start_node "${small[@]}" --weights "$wport" --weights-key-file "$tmp/job.key"
check "keyed node starts" test -n "$port"
check "keyed node: version 2 applied" wait_for version 2 /v1/weights
check "keyed node: the publisher's bytes" same_as_publisher
check "keyed node: says keyed" test "$(field "$st" keyed)" = true
check "keyed node: no failed pulls" test "$(field "$st" pulls_failed)" = 0
stop_node

# ---- the job's key from the environment, as loomd's executors start workers
LOOM_SYNC_KEY=$job_key start_node "${small[@]}" --weights "$wport"
check "env-keyed node: version applied" wait_for version 1 /v1/weights
check "env-keyed node: the publisher's bytes" same_as_publisher
stop_node

# ---- another job's key, and no key: nothing applied from the keyed publisher
start_node "${small[@]}" --weights "$wport" --weights-key-file "$tmp/other.key"
takes_nothing "another job's key"
stop_node
start_node "${small[@]}" --weights "$wport"
check "no key: said on stderr" grep -q 'weight pulls are not authenticated' "$tmp/node.err"
check "no key: the node says unkeyed" test "$(get /v1/weights | sed -n 's/.*"keyed":\([a-z]*\).*/\1/p')" = false
takes_nothing "no key"
stop_node

# ---- an impostor serving the publisher protocol without the key, where the node looks
"$loom" harvest publish --elems 65536 --interval-s 0.5 --seed 99 >"$tmp/imp.out" 2>"$tmp/imp.err" &
imp_pid=$!
iport=$(listen_port "$tmp/imp.out" publishing)
check "impostor starts (loopback, unkeyed)" test -n "$iport"
check "impostor: says unauthenticated" grep -q 'not authenticated' "$tmp/imp.err"
start_node "${small[@]}" --weights "$iport" --weights-key-file "$tmp/job.key"
takes_nothing "impostor"
stop_node

# ---- unauthenticated off loopback: refused at start
timeout 10 "$loom" harvest node "${small[@]}" --weights 10.213.7.1:7000 >"$tmp/out" 2>"$tmp/err"
check "unkeyed node, remote publisher: exit 1" test $? -eq 1
check "unkeyed node, remote publisher: says why" grep -q 'needs the job.s sync key' "$tmp/err"
check "unkeyed node, remote publisher: never listened" test "$(grep -c listening "$tmp/out")" -eq 0
"$loom" harvest publish --ip 0.0.0.0 --elems 65536 --for-s 1 >"$tmp/out" 2>"$tmp/err"
check "unkeyed publisher off loopback: exit 1" test $? -eq 1
check "unkeyed publisher off loopback: says why" grep -q 'needs the job.s sync key' "$tmp/err"
check "unkeyed publisher off loopback: never published" test "$(grep -c publishing "$tmp/out")" -eq 0

# ---- key files: group/world-readable refused, malformed keys not echoed
cp "$tmp/job.key" "$tmp/open.key" && chmod 644 "$tmp/open.key"
timeout 10 "$loom" harvest node "${small[@]}" --weights "$wport" --weights-key-file "$tmp/open.key" \
        >"$tmp/out" 2>"$tmp/err"
check "world-readable key file: exit 1" test $? -eq 1
check "world-readable key file: says so" grep -q -- '--weights-key-file: .*open.key: mode 0644' "$tmp/err"
"$loom" harvest publish --key-file "$tmp/open.key" --for-s 1 >"$tmp/out" 2>"$tmp/err"
check "publisher, world-readable key file: exit 1" test $? -eq 1
LOOM_SYNC_KEY=nothex timeout 10 "$loom" harvest node "${small[@]}" --weights "$wport" >/dev/null 2>"$tmp/err"
check "malformed LOOM_SYNC_KEY: exit 1" test $? -eq 1
check "malformed LOOM_SYNC_KEY: named, not echoed" test "$(grep -c LOOM_SYNC_KEY "$tmp/err")-$(grep -c nothex "$tmp/err")" = 1-0
"$loom" harvest node --help | grep -q -- '--weights-key-file'
check "node --help lists --weights-key-file" test $? -eq 0

echo "harvest_weights_keyed: $pass passed, $fail failed"
test "$fail" -eq 0
