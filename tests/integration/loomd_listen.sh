#!/usr/bin/env bash
# loomd's --listen beyond dotted IPv4: a name (localhost) is resolved and judged loopback on
# what it resolves to, an IPv6 address is written [ADDR]:PORT, and every refusal names the
# address it is about (not tokens). The IPv6 cases are skipped where the host has no ::1.
# Usage: loomd_listen.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
loomd=$(cd "$1" && pwd)/loomd
tmp=$(mktemp -d)
pid=
cleanup() {
        [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
        [ -z "$pid" ] || wait "$pid" 2>/dev/null || true
        rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
        echo "FAIL: $*" >&2
        exit 1
}

# serves HOST:PORT URL_HOST: starts loomd on --listen HOST:PORT without tokens, waits for its
# port file and asks /healthz at http://URL_HOST:PORT.
serves() {
        rm -rf "$tmp/d"
        "$loomd" --data-dir "$tmp/d" --listen "$1" --port-file "$tmp/port" 2>"$tmp/log" &
        pid=$!
        for _ in $(seq 500); do
                [ -s "$tmp/port" ] && break
                kill -0 $pid 2>/dev/null || fail "--listen $1: loomd exited: $(cat "$tmp/log")"
                sleep 0.01
        done
        port=$(cat "$tmp/port")
        rm -f "$tmp/port"
        python3 - "$2" "$port" <<'PY' || fail "--listen $1: no answer on $2:$port"
import http.client, sys
c = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=10)
c.request("GET", "/healthz")
sys.exit(0 if c.getresponse().status == 200 else 1)
PY
        kill $pid
        wait $pid || fail "--listen $1: loomd did not stop cleanly"
        pid=
}

# refuses ARGS... WANT: loomd exits non-zero and what it says contains WANT.
refuses() {
        local want=${*: -1}
        if "$loomd" --data-dir "$tmp/r" "${@:1:$#-1}" 2>"$tmp/err"; then
                fail "$* started"
        fi
        grep -qF -- "$want" "$tmp/err" || fail "$*: '$(cat "$tmp/err")' does not name $want"
}

serves localhost:0 localhost
grep -q "serving without authentication on loopback" "$tmp/log" ||
        fail "localhost is not judged loopback: $(cat "$tmp/log")"
echo "ok   --listen localhost:0 is loopback: serves without tokens"

if python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null; then
        serves '[::1]:0' ::1
        grep -qE "serving http on \[::1\]:[0-9]+," "$tmp/log" ||
                fail "serving line: $(cat "$tmp/log")"
        echo "ok   --listen [::1]:0 is loopback: serves without tokens; logs [::1]:PORT"
        refuses --listen '[::]:0' --insecure-loopback "refused on ::, which is not a loopback"
        refuses --listen '[::]:0' ":: is not a loopback address"
        echo "ok   --listen [::]:0 is not loopback: no --insecure-loopback, TLS required"
else
        echo "skip IPv6 cases: no ::1 on this host"
fi
refuses --listen 0.0.0.0:0 "0.0.0.0 is not a loopback address"
refuses --listen no-such-host.invalid:7480 "cannot resolve no-such-host.invalid:7480"
! grep -q "auth.db" "$tmp/err" || fail "an unknown name blames the token database: $(cat "$tmp/err")"
refuses --listen ::1:7480 "'::1:7480': write an IPv6 address in brackets"
refuses --listen '[::1:7480' "got '[::1:7480'"
echo "ok   refusals name the address: 0.0.0.0, an unknown name, IPv6 without brackets"
