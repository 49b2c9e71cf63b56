#!/usr/bin/env bash
# `loom sync` over a shaped link (network namespaces + veth + tc): the bench moves a small model
# and verifies it, and namespaces are removed after success, after a failed transfer and after
# SIGINT. Needs root (`ip netns add`); without it the test says so and exits 77, which ctest
# reports as skipped. $1 build dir, $2 source dir.
set -u
b=$1
loom="$b/loom"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 pass=0
. "$2/tests/integration/lib/sync.sh"
small=(--model tiny --bucket-mib 0.01 --density 0.02)

# ---- shaped link: only where namespaces can be made
probe="lsync-probe-$$"
if ip netns add "$probe" 2>/dev/null; then
        ip netns del "$probe"
        before=$(ip netns list | grep -c '^lsync-')
        "$loom" sync bench "${small[@]}" --link netns --link-gbps 1 --json >"$tmp/out" 2>"$tmp/err"
        check "netns bench exits 0" test $? -eq 0
        check "netns: shaped" grep -q '"shaped":true' "$tmp/out"
        check "netns: goodput measured" test "$(grep -c '"goodput_fraction":[0-9]' "$tmp/out")" -eq 3
        check "netns: all verified" test "$(grep -c '"verified":true' "$tmp/out")" -eq 3
        check "netns: removed after success" test "$(ip netns list | grep -c '^lsync-')" -eq "$before"

        "$loom" sync bench "${small[@]}" --link netns --plan topo+sparse --corrupt content >/dev/null 2>&1
        check "netns corrupt: exit 1" test $? -eq 1
        check "netns: removed after failure" test "$(ip netns list | grep -c '^lsync-')" -eq "$before"

        # A slow run interrupted half way: namespaces and rank processes must go.
        "$loom" sync bench --model tiny --link netns --link-gbps 0.001 --plan flat --seed 4242 \
                >/dev/null 2>&1 &
        pid=$!
        for _ in $(seq 50); do
                ip netns list | grep -q "^lsync-$pid-" && break
                sleep 0.1
        done
        check "netns: created during the run" bash -c "ip netns list | grep -q '^lsync-$pid-'"
        sleep 1
        kill -INT "$pid"
        wait "$pid"
        check "interrupted run exits non-zero" test $? -ne 0
        check "netns: removed after SIGINT" bash -c "! ip netns list | grep -q '^lsync-$pid-'"
        sleep 0.5 # ranks get SIGKILL from the kernel when their coordinator is gone
        check "no rank process left" bash -c "! pgrep -f 'link-gbps 0.001 --plan flat --seed 424[2]' >/dev/null"
else
        echo "SKIP: cannot create network namespaces here (needs root): the shaped link is untested"
        exit 77
fi

echo "sync_netns: $pass passed, $fail failed"
test "$fail" -eq 0
