#!/usr/bin/env bash
# loom installed like a library: `cmake --install` with DESTDIR and into a temporary prefix, then
# from that prefix only: the files (programs, sonames, headers, .pc, man pages, systemd units,
# checked with systemd-analyze when it is there), a C program built with `pkg-config loom-client`
# and run against a loomd started from the prefix, and the Python package built as a wheel,
# installed into a clean venv without network, running the toy job with LD_LIBRARY_PATH (and
# then pkg-config) pointing at the prefix.
# Usage: install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
loomd_pid=
cleanup() {
        [ -z "$loomd_pid" ] || kill "$loomd_pid" 2>/dev/null || true
        [ -z "$loomd_pid" ] || wait "$loomd_pid" 2>/dev/null || true
        rm -rf "$tmp"
}
trap cleanup EXIT
ok() { echo "ok   $*"; }
fail() {
        echo "FAIL: $*" >&2
        exit 1
}

# DESTDIR staging: everything lands under DESTDIR, and the contents name the final prefix.
DESTDIR=$tmp/stage cmake --install "$build" --prefix /opt/loom >/dev/null
stage=$tmp/stage/opt/loom
[ -x "$stage/bin/loomd" ] || fail "DESTDIR: no $stage/bin/loomd"
[ "$(find "$tmp/stage" -mindepth 1 -maxdepth 1)" = "$tmp/stage/opt" ] ||
        fail "DESTDIR: files outside /opt/loom: $(ls "$tmp/stage")"
grep -qx 'prefix=/opt/loom' "$(find "$stage" -name loom-client.pc)" ||
        fail "DESTDIR: loom-client.pc does not say prefix=/opt/loom"
grep -q '^ExecStart=/opt/loom/bin/loomd ' "$stage/lib/systemd/system/loomd.service" ||
        fail "DESTDIR: loomd.service does not start /opt/loom/bin/loomd"
ok "DESTDIR=... --prefix /opt/loom: staged, .pc and units name /opt/loom"

# The real install, into a prefix.
p=$tmp/prefix
cmake --install "$build" --prefix "$p" >/dev/null
pc=$(find "$p" -name loom-client.pc)
[ -n "$pc" ] || fail "no loom-client.pc under $p"
pcdir=$(dirname "$pc")
libdir=$(dirname "$pcdir")
for f in bin/loom bin/loomd bin/loom-state; do
        [ -x "$p/$f" ] || fail "$f not installed"
done
for h in common.h client.h sync.h state.h; do
        cmp -s "$src/include/loom/$h" "$p/include/loom/$h" || fail "header $h not installed"
done
[ "$(ls "$p/include/loom" | wc -l)" = 4 ] || fail "headers of modules with no installed library: $(ls "$p/include/loom")"
for lib in loomclient loomsync loomstate; do
        so=$libdir/lib$lib.so
        [ -f "$so.0.1.0" ] && [ -L "$so.0" ] && [ -L "$so" ] || fail "lib$lib.so{,.0,.0.1.0} missing"
        soname=$(objdump -p "$so.0.1.0" | awk '$1 == "SONAME" {print $2}')
        [ "$soname" = "lib$lib.so.0" ] || fail "lib$lib soname is '$soname', not lib$lib.so.0"
        nm -D --defined-only "$so.0.1.0" | grep -q " ${lib/loom/loom_}_" ||
                fail "lib$lib exports no ${lib/loom/loom_}_* function"
        ! nm -D --defined-only "$so.0.1.0" | grep ' loom__' || fail "lib$lib exports internals"
done
# every function an installed header declares is exported by an installed library
exported=$(for lib in loomclient loomsync loomstate; do nm -D --defined-only "$libdir/lib$lib.so.0.1.0"; done |
           awk '{print $3}')
declared=$(python3 - "$p"/include/loom/*.h <<'PY'
import re, sys
text = "".join(open(f).read() for f in sys.argv[1:])
text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)  # comments
inline = set(re.findall(r"static inline[^(]*\b(loom_\w+)\(", text))
print(" ".join(sorted(set(re.findall(r"\b(loom_[a-z0-9]\w*)\(", text)) - inline)))
PY
)
for f in $declared; do
        grep -qx "$f" <<<"$exported" || fail "installed headers declare $f, which no installed library exports"
done
ok "programs, headers, lib{loomclient,loomsync,loomstate}.so.0.1.0: sonames .so.0, only loom_* exported, every declared function exported"

export PKG_CONFIG_PATH=$pcdir
for m in loom-client loom-sync loom-state; do
        [ -f "$pcdir/$m.pc" ] || fail "$m.pc not installed"
        [ "$(pkg-config --modversion $m)" = 0.1.0 ] || fail "$m: version"
        [ "$(pkg-config --variable=prefix $m)" = "$p" ] || fail "$m: prefix is not $p"
        [ "$(pkg-config --variable=libdir $m)" = "$libdir" ] || fail "$m: libdir is not $libdir"
done
[ "$(pkg-config --print-requires-private loom-client | awk '{print $1}' | sort | paste -sd' ')" = \
        "jansson libcurl" ] || fail "loom-client: Requires.private is not libcurl jansson"
pkg-config --print-requires-private loom-state | grep -q nettle || fail "loom-state: no nettle"
ok "loom-client.pc, loom-sync.pc, loom-state.pc: version, prefix, libdir, Requires.private"

for prog in loom loomd loom-state; do
        page=$p/share/man/man1/$prog.1
        [ -s "$page" ] || fail "man page $prog.1 not installed"
        grep -q "^\.TH ${prog^^} " "$page" || fail "$prog.1 has no .TH header"
done
grep -q 'data\\-dir' "$p/share/man/man1/loomd.1" || fail "loomd.1 does not describe --data-dir"
grep -q 'host\\-bytes' "$p/share/man/man1/loom-state.1" || fail "loom-state.1 lacks --host-bytes"
ok "man pages loom.1, loomd.1, loom-state.1"

units=$p/lib/systemd/system
for u in loomd loom-state; do
        f=$units/$u.service
        [ -f "$f" ] || fail "$u.service not installed"
        grep -q "^ExecStart=$p/bin/$u " "$f" || fail "$u.service: ExecStart is not $p/bin/$u"
        for k in User=loom ProtectSystem=strict ProtectHome=yes NoNewPrivileges=yes PrivateTmp=yes \
                StateDirectory=$u RestrictAddressFamilies= CapabilityBoundingSet=; do
                grep -q "^$k" "$f" || fail "$u.service: no $k"
        done
done
grep -q '^u loom ' "$p/lib/sysusers.d/loom.conf" || fail "sysusers.d/loom.conf: no user loom"
if command -v systemd-analyze >/dev/null; then
        MANPATH=$p/share/man systemd-analyze verify "$units/loomd.service" \
                "$units/loom-state.service" || fail "systemd-analyze verify"
        ok "units: installed paths, hardening, systemd-analyze verify"
else
        ok "units: installed paths, hardening (systemd-analyze verify skipped: not installed)"
fi

# A sanitized build's libraries only load with the sanitizer runtimes first.
. "$src/tests/integration/lib/py.sh"
pre=$(san_libs "$libdir/libloomclient.so")
san_env=()
[ -z "$pre" ] || san_env=(LD_PRELOAD="$pre" ASAN_OPTIONS=detect_leaks=0)

# loomd from the prefix, on loopback without tokens.
mkdir "$tmp/data"
env "${san_env[@]}" "$p/bin/loomd" --data-dir "$tmp/data" --listen 127.0.0.1:0 \
        --port-file "$tmp/port" --insecure-loopback --quiet &
loomd_pid=$!
for _ in $(seq 500); do
        [ -s "$tmp/port" ] && break
        kill -0 "$loomd_pid" 2>/dev/null || fail "loomd from $p exited"
        sleep 0.02
done
[ -s "$tmp/port" ] || fail "loomd from $p did not write its port"
url=http://127.0.0.1:$(cat "$tmp/port")

# A C program outside the tree, built and run from the prefix only.
# shellcheck disable=SC2046
cc -Wall -Werror -o "$tmp/install_client" "$src/tests/integration/install_client.c" \
        $(pkg-config --cflags --libs loom-client) 2>"$tmp/cc.log" ||
        { cat "$tmp/cc.log"; fail "cc install_client.c \$(pkg-config --cflags --libs loom-client)"; }
ldd_line=$(LD_LIBRARY_PATH=$libdir ldd "$tmp/install_client" | grep 'libloomclient\.so\.0 ')
[[ "$ldd_line" == *"=> $libdir/libloomclient.so.0 "* ]] ||
        fail "install_client does not resolve libloomclient.so.0 in $libdir: $ldd_line"
out=$(env "${san_env[@]}" LD_LIBRARY_PATH="$libdir" "$tmp/install_client" "$url") ||
        fail "install_client against $url"
grep -q '"state": *"finished"' <<<"$out" || fail "C job did not finish: $out"
ok "C program built with pkg-config loom-client ran a job to the end on loomd from the prefix"

# The Python package: a wheel (python3 -m build, else pip wheel), built from a copy so the source
# tree stays clean, installed into a clean venv with no index.
PY=
for c in python3 /usr/bin/python3; do
        if command -v "$c" >/dev/null &&
                "$c" -c 'import setuptools, wheel, venv, ensurepip' 2>/dev/null; then
                PY=$c
                break
        fi
done
[ -n "$PY" ] || fail "no python3 with setuptools, wheel and venv (scripts/deps.sh installs them)"
cp -r "$src/python" "$tmp/pysrc"
rm -rf "$tmp/pysrc/build" "$tmp/pysrc"/*.egg-info
if "$PY" -m build --version >/dev/null 2>&1; then
        "$PY" -m build --wheel --no-isolation --outdir "$tmp/dist" "$tmp/pysrc" >"$tmp/wheel.log" 2>&1 ||
                { cat "$tmp/wheel.log"; fail "python3 -m build --wheel"; }
else
        "$PY" -m pip wheel --no-index --no-deps --no-build-isolation -w "$tmp/dist" "$tmp/pysrc" \
                >"$tmp/wheel.log" 2>&1 || { cat "$tmp/wheel.log"; fail "pip wheel"; }
fi
whl=$(ls "$tmp"/dist/loom-0.1.0-*.whl)
"$PY" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet --no-index --no-deps "$whl" || fail "pip install $whl"
ok "wheel $(basename "$whl") installed into a clean venv"

# A fresh environment: no PYTHONPATH, no LOOM_* variables, nothing from the build tree.
clean_env=(env -i HOME="$tmp" PATH=/usr/bin:/bin "${san_env[@]}")
probe='import loom, loom._native as n; n.load()
print(loom.__file__)
print([l.split()[-1] for l in open("/proc/self/maps") if "libloomclient" in l][0])'
for how in "LD_LIBRARY_PATH=$libdir" "PKG_CONFIG_PATH=$pcdir"; do
        got=$(cd "$tmp" && "${clean_env[@]}" "$how" "$tmp/venv/bin/python" -c "$probe") ||
                fail "import loom with $how"
        [[ "$(sed -n 1p <<<"$got")" == "$tmp/venv/"* ]] || fail "loom imported from $got"
        [ "$(sed -n 2p <<<"$got")" = "$libdir/libloomclient.so.0.1.0" ] ||
                fail "with $how, libloomclient loaded from $(sed -n 2p <<<"$got")"
        ok "import loom in a fresh environment with only $how: $libdir/libloomclient.so.0.1.0"
done
out=$(cd "$tmp" && "${clean_env[@]}" LD_LIBRARY_PATH="$libdir" "$tmp/venv/bin/python" \
        "$src/python/examples/toy_rl_job.py" "$url") || fail "toy_rl_job.py from the venv"
[ "$(tail -n1 <<<"$out")" = finished ] || fail "toy job did not finish: $out"
ok "python/examples/toy_rl_job.py with the installed package: $(grep -c 'iteration done' <<<"$out") iterations, finished"
