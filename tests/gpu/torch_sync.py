"""Weight sync from and to GPU memory with CUDA torch tensors on a real GPU: a trainer's bf16 and
fp32 tensors are published from the GPU (loom.weights.Publisher given a CUDA tensor), a GPU
Puller and a host Puller take version 0 dense and version 1 as a sparse delta, and every copy
equals the published bf16 bits; prints each stage's seconds and which path ran. Skips (exit 0,
with the reason) without torch, a CUDA device or a CUDA runtime loom can load.

    python3 tests/gpu/torch_sync.py [--mib 512]
"""

import argparse
import sys

from gpu_skip import cuda_torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mib", type=float, default=512.0, help="bf16 weights to move (MiB)")
    a = p.parse_args()
    torch = cuda_torch()
    if torch is None:
        return 0
    import numpy as np
    from loom import weights
    g = torch.Generator(device="cuda").manual_seed(1)
    n = max(1, int(a.mib * (1 << 20) / 2 / (8 << 20)))  # tensors of 8 Mi elements
    tensors = [torch.randn(8 << 20, device="cuda", generator=g).to(torch.bfloat16)
               for _ in range(n - 1)] + [torch.randn(4096, 1024, device="cuda", generator=g)]
    shards = [t.numel() for t in tensors]
    pub = weights.Publisher(shards, bucket_elems=1 << 22, model="gpu")
    gpu = weights.Puller(pub.endpoint, shards, model="gpu")
    host = weights.Puller(pub.endpoint, shards, model="gpu")
    flat = torch.zeros(sum(shards), dtype=torch.int16, device="cuda")
    held = np.zeros(sum(shards), np.uint16)
    for v in range(2):
        if v:  # a sparse step: 1% of the elements change
            with torch.no_grad():
                for t in tensors:
                    m = torch.rand(t.shape, device="cuda", generator=g) < 0.01
                    t[m] += 0.5
        bits = weights.bf16_bits_cuda(tensors)
        try:
            ps = pub.publish(v, bits)
        except weights.SyncError as e:
            if "no CUDA" in str(e):
                print(f"SKIP: {e}")
                return 0
            raise
        gs = gpu.pull(flat, v, 60)
        hs = host.pull(held, v, 60)
        assert ps["path"] == "cuda" and gs["path"] == "cuda" and hs["path"] == "host"
        assert torch.equal(flat, bits), f"GPU puller differs at version {v}"
        assert np.array_equal(held, bits.cpu().numpy().view(np.uint16)), f"host puller, {v}"
        out = [torch.empty_like(t) for t in tensors]
        weights.load_bf16_bits_cuda(out, flat)
        assert all(torch.equal(o.to(torch.bfloat16), t.to(torch.bfloat16))
                   for o, t in zip(out, tensors))
        mib = 2 * sum(shards) / 2**20
        print(f"ok: version {v} ({'dense' if gs['dense'] else 'delta'}), {mib:.0f} MiB of bf16 on "
              f"{flat.device}, runtime {ps['runtime']}: publish D2H {ps['d2h_s']:.4f} s, encode "
              f"{ps['encode_s']:.4f} s | pull {gs['bytes']} bytes, recv {gs['recv_s']:.4f} s, "
              f"decode {gs['decode_s']:.4f} s, H2D {gs['h2d_s']:.4f} s, base D2H "
              f"{gs['d2h_s']:.4f} s, total {gs['seconds']:.4f} s")
    pub.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
