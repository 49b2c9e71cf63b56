#!/usr/bin/env bash
# The sync engine's GPU path from Python and the command line, on the test double of the CUDA
# runtime (tests/gpu/fakecudart.c, via LOOM_CUDART; its copies complete late on a thread per
# stream): a Publisher given an object with __cuda_array_interface__ publishes from the double's
# "device memory", a host Puller and a GPU Puller take its versions bit for bit (dense, then a
# delta), each call says which path ran and its stages; without a runtime the error says so;
# `loom sync bench --device cuda` verifies, and says why it cannot run without a runtime.
# Real GPUs: tests/gpu/ (make test-gpu). Args: build, src.
set -euo pipefail
build=$1 src=$2
. "$src/tests/integration/lib/py.sh"
need_py /usr/bin/python3 numpy
pre=$(san_libs "$build/libloomsync.so")
export LOOM_SYNC_LIB=$build/libloomsync.so PYTHONPATH=$src/python
export FAKECUDART_ASYNC=1 FAKECUDART_DELAY_US=300
LD_PRELOAD=$pre ASAN_OPTIONS=detect_leaks=0 LOOM_CUDART=$build/libfakecudart.so \
        /usr/bin/python3 - <<'PY'
import ctypes, os
import numpy as np
from loom import weights

cu = ctypes.CDLL(os.environ["LOOM_CUDART"])


class FakeCudaArray:
    """GPU memory of the runtime double, exposed as CuPy or Numba expose theirs."""

    def __init__(self, n):
        self.ptr = ctypes.c_void_p()
        assert cu.cudaMalloc(ctypes.byref(self.ptr), ctypes.c_size_t(2 * n)) == 0
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<u2",
                                         "data": (self.ptr.value, False), "strides": None,
                                         "version": 3}

    def put(self, a):
        assert cu.cudaMemcpy(self.ptr, a.ctypes.data_as(ctypes.c_void_p),
                             ctypes.c_size_t(a.nbytes), 1) == 0

    def get(self, n):
        out = np.empty(n, np.uint16)
        assert cu.cudaMemcpy(out.ctypes.data_as(ctypes.c_void_p), self.ptr,
                             ctypes.c_size_t(out.nbytes), 2) == 0
        return out


shards = [3000, 70000, 17]
n = sum(shards)
rng = np.random.default_rng(3)
v0 = rng.integers(0, 1 << 16, n, dtype=np.uint16)
v1 = v0.copy()
v1[rng.choice(n, 500, replace=False)] ^= 0x5A5A
src, dst = FakeCudaArray(n), FakeCudaArray(n)
pub = weights.Publisher(shards, bucket_elems=4096, model="m")
host = weights.Puller(pub.endpoint, shards, model="m")
gpu = weights.Puller(pub.endpoint, shards, model="m")
held = np.zeros(n, np.uint16)
for v, bits in enumerate((v0, v1)):
    src.put(bits)
    st = pub.publish(v, src)
    assert st["path"] == "cuda" and st["d2h_bytes"] == 2 * n, st
    assert st["runtime"] == os.environ["LOOM_CUDART"], st
    h = host.pull(held, v, 10)
    assert h["path"] == "host" and h["dense"] == (v == 0), h
    assert np.array_equal(held, bits), f"host puller, version {v}"
    g = gpu.pull(dst, v, 10)
    assert g["path"] == "cuda" and g["dense"] == (v == 0), g
    assert g["bytes"] == h["bytes"], (g, h)
    assert np.array_equal(dst.get(n), bits), f"GPU puller, version {v}"
assert g["changed"] == 500, g
# up to date: the GPU Puller's kept checksums answer it without reading the device
g = gpu.pull(dst, 1, 10)
assert g["d2h_bytes"] == 0 and g["changed"] == 0 and np.array_equal(dst.get(n), v1), g
# a wrong size is refused naming the field
try:
    pub.publish(5, FakeCudaArray(n - 1))
    raise AssertionError("a short array was published")
except weights.SyncError as e:
    assert e.field == "weights", e
pub.close()
print("sync_cuda: GPU publisher -> host and GPU pullers, dense and delta, bit for bit")
PY
# no runtime: the call says so and names it
LD_PRELOAD=$pre ASAN_OPTIONS=detect_leaks=0 LOOM_CUDART=/nonexistent/libcudart.so \
        /usr/bin/python3 - <<'PY'
import ctypes
import numpy as np
from loom import weights


class Devptr:
    __cuda_array_interface__ = {"shape": (10,), "typestr": "<u2", "data": (4096, False),
                                "strides": None, "version": 3}


pub = weights.Publisher([10])
try:
    pub.publish(0, Devptr())
    raise AssertionError("published without a runtime")
except weights.SyncError as e:
    assert "no CUDA runtime: " in str(e) and e.field == "cuda", (str(e), e.field)
pub.publish(0, np.arange(10, dtype=np.uint16))  # the host path still works
pub.close()
print("sync_cuda: no runtime refused with the reason")
PY
out=$(LOOM_CUDART=$build/libfakecudart.so "$build/loom" sync bench --device cuda --model tiny \
        --bucket-mib 0.05 2>/dev/null)
echo "$out"
grep -q "^v1 delta" <<<"$out"
grep -q "bit for bit" <<<"$out"
rc=0
err=$(LOOM_CUDART=/nonexistent/libcudart.so "$build/loom" sync bench --device cuda --model tiny \
        2>&1 >/dev/null) || rc=$?
echo "$err"
[ $rc -eq 1 ]
grep -q -- "--device cuda: no CUDA runtime: " <<<"$err"
echo "sync_cuda: bench verified; without a runtime it exits 1 saying why"
