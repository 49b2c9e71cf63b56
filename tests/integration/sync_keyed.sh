#!/usr/bin/env bash
# Keyed transfers between real processes (`loom sync bench` over loopback): with the job's sync
# key every frame between training ranks, relays and pulling peers carries a UMAC-64 tag. A
# keyed run verifies and moves the same bytes as an unkeyed one (plus 8 bytes of tag per frame);
# rollout ranks holding another job's key refuse the training ranks' connections, exit 1 and
# keep serving their version; a key file others can read, or a malformed key, is refused before
# anything runs. Keyed is the default: without the job's key the bench keys the run with a
# fresh one; --unkeyed runs unauthenticated (and says so) on loopback only.
# $1 build dir, $2 source dir.
set -u
b=$1
loom="$b/loom"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 pass=0
. "$2/tests/integration/lib/sync.sh"

small=(--model tiny --bucket-mib 0.01 --density 0.02 --link loopback --timeout 60)
(umask 077 && printf '%064x\n' 1 >"$tmp/job.key" && printf '%064x\n' 2 >"$tmp/other.key")
job_key=$(cat "$tmp/job.key")

# ---- no key given: keyed all the same, with a key made for the run
env -u LOOM_SYNC_KEY "$loom" sync bench "${small[@]}" --plan topo --json >"$tmp/default" \
        2>"$tmp/default.err"
check "no key: exits 0" test $? -eq 0
check "no key: the run is keyed" test "$(field "$(cat "$tmp/default")" keyed)" = true
check "no key: verified" test "$(field "$(cat "$tmp/default")" verified)" = true
check "no key: no unauthenticated notice" test "$(grep -c 'not authenticated' "$tmp/default.err")" -eq 0

# ---- --unkeyed: on loopback only, and said once on stderr
env -u LOOM_SYNC_KEY "$loom" sync bench "${small[@]}" --unkeyed --json >"$tmp/plain" 2>"$tmp/plain.err"
check "unkeyed exits 0" test $? -eq 0
check "unkeyed: said once on stderr" test "$(grep -c 'not authenticated' "$tmp/plain.err")" -eq 1
check "unkeyed: the run says so" test "$(field "$(grep '"plan":"topo"' "$tmp/plain")" keyed)" = false
for l in netns auto; do
        "$loom" sync bench --model tiny --unkeyed --link "$l" >"$tmp/out" 2>"$tmp/err"
        check "--unkeyed --link $l: refused, exit 1" test $? -eq 1
        check "--unkeyed --link $l: says loopback only" grep -q -- '--unkeyed: .*loopback only' "$tmp/err"
        check "--unkeyed --link $l: nothing ran" test ! -s "$tmp/out"
done
"$loom" sync bench "${small[@]}" --unkeyed --key-file "$tmp/job.key" >/dev/null 2>&1
check "--unkeyed with --key-file: exit 2" test $? -eq 2

# ---- keyed from a key file and from the environment: verified, same volumes plus tags
"$loom" sync bench "${small[@]}" --key-file "$tmp/job.key" --json >"$tmp/keyed" 2>"$tmp/keyed.err"
check "keyed (--key-file) exits 0" test $? -eq 0
check "keyed: no unauthenticated notice" test "$(grep -c 'not authenticated' "$tmp/keyed.err")" -eq 0
LOOM_SYNC_KEY=$job_key "$loom" sync bench "${small[@]}" --json >"$tmp/env" 2>/dev/null
check "keyed (LOOM_SYNC_KEY) exits 0" test $? -eq 0
for p in flat topo topo+sparse; do
        a=$(grep "\"plan\":\"$p\"" "$tmp/plain")
        k=$(grep "\"plan\":\"$p\"" "$tmp/keyed")
        v=$(grep "\"plan\":\"$p\"" "$tmp/env")
        check "$p keyed verified" test "$(field "$k" verified)" = true
        check "$p env-keyed verified" test "$(field "$v" verified)" = true
        check "$p keyed: every rank committed" test "$(field "$k" ranks_ok)" = 8
        check "$p: same model bytes" test "$(field "$k" model_bytes)" = "$(field "$a" model_bytes)"
        # the same frames, each followed by an 8-byte tag
        ka=$(field "$k" slow_link_bytes) pa=$(field "$a" slow_link_bytes)
        check "$p: tags add bytes" lt "$pa" "$ka"
        check "$p: 8 bytes per frame" test $(((ka - pa) % 8)) -eq 0
        [ "$p" = topo+sparse ] || # dense frames: tags are a rounding error
                check "$p: tags add under 1%" lt "$ka" "$(awk -v x="$pa" 'BEGIN { print x * 1.01 }')"
done

# ---- late joiners catch up from their peers' relays over keyed connections
"$loom" sync bench "${small[@]}" --plan topo+sparse --late 3 --key-file "$tmp/job.key" \
        --json >"$tmp/late" 2>/dev/null
check "keyed late joiners: exit 0" test $? -eq 0
check "keyed late joiners: all 8 ranks verified" grep -q '"verified":true.*"ranks_ok":8' "$tmp/late"

# ---- rollout ranks keyed for another job refuse every frame and apply nothing
for p in flat topo topo+sparse; do
        "$loom" sync bench "${small[@]}" --plan "$p" --key-file "$tmp/job.key" \
                --rollout-key-file "$tmp/other.key" --json >"$tmp/wrong" 2>"$tmp/wrong.err"
        check "$p wrong key: exit 1" test $? -eq 1
        w=$(cat "$tmp/wrong")
        check "$p wrong key: not verified" test "$(field "$w" verified)" = false
        check "$p wrong key: no rank committed" test "$(field "$w" ranks_ok)" = 0
        check "$p wrong key: every rank still serves version 0 intact" \
                test "$(field "$w" ranks_intact)" = 8
        check "$p wrong key: the refusal names the key" grep -q "key: a peer does not hold the job's sync key" "$tmp/wrong"
        check "$p wrong key: no fast-link bytes moved" test "$(field "$w" fast_link_bytes)" = 0
done
# the same with the trainer's key from the environment
LOOM_SYNC_KEY=$job_key "$loom" sync bench "${small[@]}" --plan topo \
        --rollout-key-file "$tmp/other.key" >"$tmp/wrong" 2>/dev/null
check "env key vs another job's rollout: exit 1" test $? -eq 1
check "text form says why" grep -q "failure: rollout rank .*does not hold the job's sync key" "$tmp/wrong"

# ---- a wire fault on a keyed run is still caught and changes nothing
"$loom" sync bench "${small[@]}" --plan topo --corrupt wire --key-file "$tmp/job.key" \
        --json >"$tmp/out" 2>/dev/null
check "keyed corrupt bucket: exit 1" test $? -eq 1
check "keyed corrupt bucket: every rank intact" grep -q '"ranks_intact":8' "$tmp/out"

# ---- bad keys: exit 1 before anything runs, the source named, nothing on stdout
cp "$tmp/job.key" "$tmp/open.key" && chmod 644 "$tmp/open.key"
"$loom" sync bench "${small[@]}" --key-file "$tmp/open.key" >"$tmp/out" 2>"$tmp/err"
check "world-readable key file: exit 1" test $? -eq 1
check "world-readable key file: says so" grep -q -- '--key-file: .*open.key: mode 0644 lets group or others read' "$tmp/err"
check "world-readable key file: nothing ran" test ! -s "$tmp/out"
chmod 640 "$tmp/open.key"
"$loom" sync bench "${small[@]}" --key-file "$tmp/open.key" >/dev/null 2>"$tmp/err"
check "group-readable key file: exit 1" test $? -eq 1
"$loom" sync bench "${small[@]}" --key-file "$tmp/missing.key" >/dev/null 2>"$tmp/err"
check "missing key file: exit 1" test $? -eq 1
check "missing key file: named" grep -q 'missing.key' "$tmp/err"
(umask 077 && echo nothex >"$tmp/bad.key")
"$loom" sync bench "${small[@]}" --key-file "$tmp/bad.key" >"$tmp/out" 2>"$tmp/err"
check "malformed key file: exit 1" test $? -eq 1
check "malformed key file: not echoed" test "$(grep -c nothex "$tmp/err")" -eq 0
LOOM_SYNC_KEY=abc "$loom" sync bench "${small[@]}" >"$tmp/out" 2>"$tmp/err"
check "malformed LOOM_SYNC_KEY: exit 1" test $? -eq 1
check "malformed LOOM_SYNC_KEY: named" grep -q 'LOOM_SYNC_KEY' "$tmp/err"
check "malformed LOOM_SYNC_KEY: nothing ran" test ! -s "$tmp/out"
"$loom" sync bench "${small[@]}" --key-file >/dev/null 2>&1
check "--key-file without a value: exit 2" test $? -eq 2

echo "sync_keyed: $pass passed, $fail failed"
test "$fail" -eq 0
