#!/usr/bin/env bash
# Gather loom's programs, its shared libraries and the non-glibc libraries they link into one
# folder that runs on another Linux machine (glibc as new as this one's) with
# LD_LIBRARY_PATH set to it, plus the Python package and the GPU tests and benchmarks:
#
#   bash scripts/gpu-bundle.sh [BUILD=build] [OUT=gpu-bundle]
#   env -i LD_LIBRARY_PATH=gpu-bundle gpu-bundle/loom --help
#   cd gpu-bundle && make test-gpu                # on the GPU machine (docs/gpu.md)
#
# The CUDA runtime is not bundled: loom loads the machine's libcudart with dlopen at run time
# (or the file $LOOM_CUDART names). The test double of the runtime is never bundled.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
out=${2:-gpu-bundle}
for p in loom loomd loom-state; do
        [ -x "$build/$p" ] || { echo "gpu-bundle: $build/$p missing: build first (make build)" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/python" "$out/tests" "$out/examples" "$out/scripts"
bins=("$build/loom" "$build/loomd" "$build/loom-state")
libs=()
for so in "$build"/*.so; do
        case $(basename "$so") in libfakecudart.so) continue ;; esac
        libs+=("$so")
done
cp "${bins[@]}" "${libs[@]}" "$out/"
# The libraries they link, minus glibc's own (the target's must serve: same ABI) and the
# dynamic loader. ldd lists the whole closure, so one pass is enough.
glibc='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libBrokenLocale|libnss_.*|libmvec)\.so'
ldd "${bins[@]}" "${libs[@]}" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
        sort -u | while read -r name path; do
        if ! [[ $name =~ $glibc ]]; then
                cp -L "$path" "$out/$name"
        fi
done
cp -r "$src/python/loom" "$out/python/"
find "$out/python" -name __pycache__ -prune -exec rm -rf {} +
cp -r "$src/tests/gpu" "$out/tests/"
rm -f "$out/tests/gpu/fakecudart.c" "$out/tests/gpu/fakecudart.h"
cp "$src/tests/integration/loomd_harness.py" "$out/tests/gpu/"
cp -r "$src/examples/rl" "$out/examples/"
find "$out/examples" -name __pycache__ -prune -exec rm -rf {} +
cp -r "$src/scripts/gpu" "$out/scripts/"
cat >"$out/Makefile" <<'MK'
# make test-gpu: loom's GPU tests and benchmarks from this bundle (docs/gpu.md)
test-gpu:
	@bash tests/gpu/run.sh .
.PHONY: test-gpu
MK
n=$(find "$out" -maxdepth 1 -name '*.so*' | wc -l)
echo "gpu-bundle: $out: 3 programs, $n shared libraries, $(du -sh "$out" | cut -f1)"
