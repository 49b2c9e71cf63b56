#!/usr/bin/env bash
# loom-state with torch tensors through the Python API: a bf16 tensor in plain memory and one in
# an emulated device buffer round-trip bit for bit. Without torch the test says so and exits 77,
# which ctest reports as skipped. Args: build dir, source dir.
set -euo pipefail
build=$1 src=$2
. "$src/tests/integration/lib/py.sh"
need_py /usr/bin/python3 "torch, numpy" "torch tensors through loom-state are untested"
# A sanitized libloomstate.so loads into Python only with the sanitizer runtimes preloaded.
san_preload "$build/libloomstate.so"
dir=$(mktemp -d)
"$build/loom-state" --dir "$dir" --host-bytes 16M --disk-bytes 16M --no-mlock --quiet &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
LOOM_STATE_LIB=$build/libloomstate.so /usr/bin/python3 - "$dir/loom-state.sock" "$src" <<'PY'
import os, sys
sys.path.insert(0, os.path.join(sys.argv[2], "tests", "integration"))
sys.path.insert(0, os.path.join(sys.argv[2], "python"))
import torch
from loomd_harness import wait_unix_socket
from loom import state
sock = sys.argv[1]
assert wait_unix_socket(sock), "loom-state did not start"
c = state.Client(sock)
tt = torch.arange(4096, dtype=torch.bfloat16).reshape(64, 64)
c.offload({"t": tt}, job="torch", version=1)
back = torch.zeros_like(tt)
c.load({"t": back}, job="torch", version=1)
assert torch.equal(tt, back), "bf16 tensor in plain memory"
print("ok: a bf16 torch tensor round-trips")
dev = state.DeviceBuffer(1 << 20)
c2 = state.Client(sock, devices=[dev])
d = dev.tensor((64, 64), torch.bfloat16)
d.copy_(tt * 2)
c2.offload({"d": d}, job="torch", version=2)
d.zero_()
c2.load({"d": d}, job="torch", version=2)
assert torch.equal(d, tt * 2), "bf16 tensor in a device buffer"
print("ok: a bf16 torch tensor in a sealed device buffer round-trips")
PY
