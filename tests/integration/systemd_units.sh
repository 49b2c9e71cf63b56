#!/usr/bin/env bash
# The installed systemd units: loomd.service and loom-state.service are Type=notify with a
# watchdog (the programs call sd_notify), and `systemd-analyze verify` accepts them as installed
# into a prefix (ExecStart, man pages and all). Exit 77 (skipped) without systemd-analyze.
# Usage: systemd_units.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
command -v systemd-analyze >/dev/null || {
        echo "skip: systemd-analyze is not installed"
        exit 77
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
        echo "FAIL: $*" >&2
        exit 1
}
cmake --install "$build" --prefix "$tmp/p" >/dev/null
units=$tmp/p/lib/systemd/system
if grep -qx 'SYSTEMD_FOUND:INTERNAL=1' "$build/CMakeCache.txt"; then
        want=notify
else
        want=simple # built without libsystemd: the programs cannot say READY
fi
for u in loomd loom-state; do
        f=$units/$u.service
        grep -qx "Type=$want" "$f" || fail "$u.service: not Type=$want"
        if [ $want = notify ]; then
                grep -q '^WatchdogSec=[1-9]' "$f" || fail "$u.service: no WatchdogSec"
        fi
done
echo "ok   units are Type=$want"
out=$(MANPATH=$tmp/p/share/man systemd-analyze verify "$units/loomd.service" \
        "$units/loom-state.service" 2>&1) || fail "systemd-analyze verify: $out"
# verify exits 0 on some warnings; none is expected from these units.
[ -z "$out" ] || fail "systemd-analyze verify printed: $out"
echo "ok   systemd-analyze verify loomd.service loom-state.service"
