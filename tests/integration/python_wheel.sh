#!/usr/bin/env bash
# The Python package builds and installs with any python3, offline: its build backend
# (python/loom_build_backend.py) needs nothing installed, so a python3 without setuptools, wheel
# or the build package (pyenv, conda, uv) builds the wheel from a folder where a build/ directory
# (CMake's) would shadow the `build` module. For each distinct python3 found (PATH, /usr/bin):
# pip wheel from the folder above python/, the wheel into a clean venv, an editable install.
# Usage: python_wheel.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
        echo "FAIL: $*" >&2
        exit 1
}
declare -A seen=()
n=0
for c in $(type -ap python3) /usr/bin/python3; do
        real=$(readlink -f "$(command -v "$c")")
        # pyenv's shim resolves to the interpreter it runs
        real=$("$c" -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null ||
                echo "$real")
        [ -n "${seen[$real]:-}" ] && continue
        seen[$real]=1
        "$c" -c 'import venv, ensurepip' 2>/dev/null || {
                echo "skip $real: no venv/ensurepip"
                continue
        }
        n=$((n + 1))
        w=$tmp/$n
        mkdir -p "$w/root/build" # the repository root, with a CMake build folder
        cp -r "$src/python" "$w/root/python"
        rm -rf "$w/root/python/build" "$w/root/python/dist" "$w/root/python"/*.egg-info
        (cd "$w/root" && "$c" -m pip wheel --quiet --no-index --no-deps -w dist ./python) \
                >"$w/log" 2>&1 || fail "$real: pip wheel: $(cat "$w/log")"
        whl=$(ls "$w/root/dist"/loom-0.1.0-py3-none-any.whl) || fail "$real: no wheel"
        "$c" -m venv "$w/venv"
        "$w/venv/bin/pip" install --quiet --no-index --no-deps "$whl" >"$w/log" 2>&1 ||
                fail "$real: pip install $whl: $(cat "$w/log")"
        got=$(cd "$w" && "$w/venv/bin/python" -c 'import loom, importlib.metadata as m
print(loom.__file__); print(m.version("loom"))')
        [[ "$(sed -n 1p <<<"$got")" == "$w/venv/"* ]] || fail "$real: loom imported from $got"
        [ "$(sed -n 2p <<<"$got")" = 0.1.0 ] || fail "$real: version $(sed -n 2p <<<"$got")"
        "$w/venv/bin/pip" uninstall --quiet --yes loom >/dev/null
        "$w/venv/bin/pip" install --quiet --no-index --no-deps -e "$w/root/python" >"$w/log" 2>&1 ||
                fail "$real: pip install -e: $(cat "$w/log")"
        got=$(cd "$w" && "$w/venv/bin/python" -c 'import loom; print(loom.__file__)')
        [ "$got" = "$w/root/python/loom/__init__.py" ] || fail "$real: editable loom from $got"
        echo "ok   $real ($("$c" -V 2>&1)): wheel from beside a build/ folder, venv install, editable"
done
[ $n -gt 0 ] || {
        echo "skip: no python3 with venv"
        exit 77
}
