"""loom.state with CUDA torch tensors on a real GPU: a model-sized set of bf16 weights and fp32
Adam moments offloads from GPU memory to a loom-state daemon and loads back onto the same GPU,
bit for bit; prints the GB/s of each way and which copy path ran. Skips (exit 0, with the
reason) without torch, a CUDA device or a CUDA runtime loom can load.

    python3 tests/gpu/torch_state.py BUNDLE_OR_BUILD_DIR [--gib 2]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

from gpu_skip import cuda_torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bundle")
    p.add_argument("--gib", type=float, default=2.0, help="bytes of state to move (GiB)")
    a = p.parse_args()
    torch = cuda_torch()
    if torch is None:
        return 0
    torch.zeros(1, device="cuda")  # load torch's CUDA runtime first: loom.state then uses it
    from loom import state
    from loomd_harness import wait_unix_socket
    ok, why = state.cuda_available()
    if not ok:
        print(f"SKIP: {why}")
        return 0
    print(f"CUDA runtime: {why}; device: {torch.cuda.get_device_name(0)}")
    d = tempfile.mkdtemp(prefix="loom-gpu-")
    total = int(a.gib * (1 << 30))
    daemon = subprocess.Popen([os.path.join(a.bundle, "loom-state"), "--dir", d, "--host-bytes",
                               str(2 * total + (64 << 20)), "--disk-bytes", "64M", "--quiet"])
    try:
        sock = os.path.join(d, "loom-state.sock")
        assert wait_unix_socket(sock), "loom-state did not start"
        c = state.Client(sock)
        g = torch.Generator(device="cuda").manual_seed(1)
        n = total // (3 * 64 << 20) or 1            # tensors of 32 Mi elements: w, m, v
        ts = {}
        for i in range(n):
            ts[f"w.{i}"] = torch.randn(32 << 20, device="cuda", generator=g).to(torch.bfloat16)
            ts[f"m.{i}"] = torch.randn(16 << 20, device="cuda", generator=g)
            ts[f"v.{i}"] = torch.rand(16 << 20, device="cuda", generator=g)
        nbytes = sum(t.numel() * t.element_size() for t in ts.values())
        want = {k: v.clone() for k, v in ts.items()}
        best_off = best_load = 1e9
        for rep in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            r = c.offload(ts, job="gpu", version=rep + 1)
            best_off = min(best_off, time.perf_counter() - t0)
            assert r.path == "cuda", r
            for t in ts.values():
                t.zero_()
            t0 = time.perf_counter()
            r = c.load(ts, job="gpu", version=rep + 1)
            best_load = min(best_load, time.perf_counter() - t0)
            assert r.path == "cuda" and r.found == "host", r
            bad = [k for k in ts if ts[k].device != want[k].device or not torch.equal(ts[k],
                                                                                       want[k])]
            assert not bad, f"differ after the round trip: {bad[:5]}"
            c.drop("gpu", rep + 1)
        print(f"ok: {nbytes / 2**30:.2f} GiB of bf16 weights and fp32 moments round-trip on "
              f"{ts['w.0'].device}, path {r.path}, {r.buckets} buckets")
        print(f"  offload GPU -> loom-state host tier  {nbytes / best_off / 1e9:7.2f} GB/s")
        print(f"  load    loom-state host tier -> GPU  {nbytes / best_load / 1e9:7.2f} GB/s")
        c.close()
        return 0
    finally:
        daemon.terminate()
        daemon.wait()
        subprocess.run(["rm", "-rf", d])


if __name__ == "__main__":
    sys.exit(main())
