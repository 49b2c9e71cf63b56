#!/usr/bin/env bash
# loom-state's CUDA path through the Python API, on the test double of the CUDA runtime
# (tests/gpu/fakecudart.c, via LOOM_CUDART): arrays exposing __cuda_array_interface__ in the
# double's "device memory" round-trip beside host arrays, the call says which path ran, and
# without a runtime the error says so. Real GPUs: tests/gpu/ (make test-gpu). Args: build, src.
set -euo pipefail
build=$1 src=$2
. "$src/tests/integration/lib/py.sh"
need_py /usr/bin/python3 numpy
san_preload "$build/libloomstate.so"
dir=$(mktemp -d)
"$build/loom-state" --dir "$dir" --host-bytes 16M --disk-bytes 16M --no-mlock --quiet &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
export LOOM_STATE_LIB=$build/libloomstate.so PYTHONPATH=$src/python:$src/tests/integration
# the double's copies complete late, on a thread per stream: the call must wait for them
FAKECUDART_ASYNC=1 FAKECUDART_DELAY_US=500 LOOM_CUDART=$build/libfakecudart.so \
        /usr/bin/python3 - "$dir/loom-state.sock" <<'PY'
import ctypes, os, sys
import numpy as np
from loomd_harness import wait_unix_socket
from loom import state

sock = sys.argv[1]
assert wait_unix_socket(sock), "loom-state did not start"
cu = ctypes.CDLL(os.environ["LOOM_CUDART"])


class FakeCudaArray:
    """GPU memory of the runtime double, exposed as CuPy or Numba expose theirs."""

    def __init__(self, shape, typestr, nbytes):
        self.ptr = ctypes.c_void_p()
        assert cu.cudaMalloc(ctypes.byref(self.ptr), ctypes.c_size_t(nbytes)) == 0
        self.nbytes = nbytes
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (self.ptr.value, False), "strides": None,
                                         "version": 3}

    def put(self, a):
        assert cu.cudaMemcpy(self.ptr, a.ctypes.data_as(ctypes.c_void_p),
                             ctypes.c_size_t(a.nbytes), 1) == 0

    def get(self, dtype, shape):
        out = np.empty(shape, dtype)
        assert cu.cudaMemcpy(out.ctypes.data_as(ctypes.c_void_p), self.ptr,
                             ctypes.c_size_t(out.nbytes), 2) == 0
        return out


ok, lib = state.cuda_available()
assert ok and lib == os.environ["LOOM_CUDART"], (ok, lib)
c = state.Client(sock)
c.cuda_bucket(64 << 10)
rng = np.random.default_rng(7)
w = rng.standard_normal((256, 128)).astype(np.float32)       # 128 KiB: a bucket of its own
b = rng.integers(0, 100, 1000).astype(np.int64)
g = FakeCudaArray((256, 128), "<f4", w.nbytes)
g.put(w)
h = rng.standard_normal(64).astype(np.float32)               # host memory, same call
r = c.offload({"w": g, "b": FakeCudaArray((1000,), "<i8", b.nbytes), "h": h}, job="j", version=1)
assert r.path == "cuda+emulated", r
assert r.bytes == w.nbytes + b.nbytes + h.nbytes, r
print("ok: one call, GPU and host tensors:", r)
g.put(np.zeros_like(w))
r = c.load({"w": g}, job="j", version=1)
assert r.path == "cuda" and r.found == "host" and r.buckets == 1, r
assert np.array_equal(g.get(np.float32, w.shape), w), "GPU tensor differs after the round trip"
print("ok: a GPU tensor round-trips through the CUDA path:", r)
# a shard of it into GPU memory: the re-layout reload works the same on the CUDA path
half = FakeCudaArray((128, 128), "<f4", w.nbytes // 2)
c.load({state.Slice("w", rows=(128, 256)): half}, job="j", version=1)
assert np.array_equal(half.get(np.float32, (128, 128)), w[128:]), "shard"
print("ok: a TP shard of a stored tensor loads into GPU memory")
try:
    FakeCudaArray((4,), "<c8", 32).__cuda_array_interface__ and c.offload(
        {"x": FakeCudaArray((4,), "<c8", 32)}, job="j", version=2)
    raise SystemExit("complex64 accepted")
except ValueError as e:
    assert "typestr <c8" in str(e), e
PY
# no runtime: the error names it and nothing is stored
LOOM_CUDART=/nonexistent/libcudart.so /usr/bin/python3 - "$dir/loom-state.sock" <<'PY'
import sys
from loom import state

class Gpu:
    __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (4096, False),
                                "strides": None, "version": 3}

c = state.Client(sys.argv[1])
ok, why = state.cuda_available()
assert not ok and why.startswith("no CUDA runtime: LOOM_CUDART=/nonexistent"), why
try:
    c.offload({"x": Gpu()}, job="none", version=1)
    raise SystemExit("offload of a GPU tensor without a runtime succeeded")
except state.StateError as e:
    assert e.code == state.EIO and "no CUDA runtime" in str(e), e
assert "none" not in c.stats()["jobs"]
print("ok: without a CUDA runtime, GPU tensors are refused with:", why)
PY
# the bench: without a runtime exit 1 with the reason; bad usage exit 2; on the double it runs
set +e
LOOM_CUDART=/nonexistent/libcudart.so "$build/loom-state" bench --device cuda --dir "$dir" 2>"$dir/err"
rc=$?
set -e
[ $rc -eq 1 ] && grep -q "^loom-state bench --device cuda: no CUDA runtime: LOOM_CUDART=/nonexistent" "$dir/err"
for bad in "--device gpu" "--device cuda --bytes 1TB" "--device cuda --gpu -1"; do
        set +e
        # shellcheck disable=SC2086
        "$build/loom-state" bench $bad 2>/dev/null
        rc=$?
        set -e
        [ $rc -eq 2 ] || { echo "FAIL: bench $bad exited $rc, not 2"; exit 1; }
done
out=$(LOOM_CUDART=$build/libfakecudart.so "$build/loom-state" bench --device cuda --bytes 8M \
        --bucket 1M --dir "$dir" --repeats 1 --json)
echo "$out"
grep -q '"path":"cuda".*"buckets":8,' <<<"$out"
echo "ok: loom-state bench --device cuda: no runtime exit 1, bad usage exit 2, runs on the double"
