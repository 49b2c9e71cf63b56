"""The GRPO trainer's step and its Adam state through loom-state, on a CPU or a CUDA device:
the policy of grpo.py at a given size (random init), a few GRPO steps on a sampled batch, then
the trainer's end-of-permit offload (fp32 master weights and Adam moments, as job.py's
TrainerState does with --residency loom-state) and the next permit's load, through a private
loom-state daemon. Prints the step time, the bytes, the offload and load GB/s and which copy path
loom-state took ('cuda' for GPU tensors, 'emulated' for host ones); checks that the moments come
back bit for bit on the device they left.

    python3 examples/rl/gpu_bench.py --loom-state build/loom-state            # CPU, size m
    python3 examples/rl/gpu_bench.py --loom-state B/loom-state --device cuda --size 350m

Exit 0 with "SKIP: ..." when --device auto/cuda finds no CUDA device or torch is missing.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))


def wait_socket(path, timeout_s=10.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if os.path.exists(path):
            return True
        time.sleep(0.02)
    return False


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--loom-state", required=True, help="the loom-state program")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (default auto)")
    p.add_argument("--size", default=None, help="grpo.SIZES key (default: 350m on cuda, m on "
                   "cpu)")
    p.add_argument("--steps", type=int, default=3, help="GRPO steps timed (default 3)")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=8)
    a = p.parse_args(argv)
    try:
        import torch
        import grpo as G
    except ImportError as err:
        print(f"SKIP: {err}")
        return 0
    try:
        dev = G.pick_device(a.device)
    except RuntimeError as err:
        print(f"SKIP: {err}")
        return 0
    except ValueError as err:
        p.error(str(err))
    size = a.size or ("350m" if dev.type == "cuda" else "m")
    if size not in G.SIZES:
        p.error(f"--size: one of {', '.join(G.SIZES)}, not {size!r}")
    G.setup_torch(dev)
    from loom import state
    if dev.type == "cuda":
        torch.zeros(1, device=dev)  # torch's CUDA runtime first: loom.state then shares it
        ok, why = state.cuda_available()
        if not ok:
            print(f"SKIP: {why}")
            return 0

    task = G.TASKS["reverse"]
    model = G.make_policy(size, 1).to(dev)
    ref = G.make_policy(size, 1).to(dev).eval()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    g, rng = G.gen(1, "bench")
    prompts = [q for q in task.draw(rng, a.prompts) for _ in range(a.group)]
    toks, logp, mask = G.sample(model, prompts, task.max_new, g)
    rewards = torch.tensor([G.reward(task, q, t.tolist()) for q, t in zip(prompts, toks)],
                           device=dev)
    batch = {"prompts": prompts, "tokens": toks, "logp": logp, "mask": mask, "rewards": rewards,
             "group": a.group}
    times = []
    for _ in range(a.steps + 1):  # the first step warms up (allocations, kernels)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss, _ = G.grpo_loss(model, ref, batch, 0.02)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    params = list(model.parameters())
    items = {f"w.{i}": q.detach() for i, q in enumerate(params)}
    for i, q in enumerate(params):
        items[f"m.{i}"] = opt.state[q]["exp_avg"]
        items[f"v.{i}"] = opt.state[q]["exp_avg_sq"]
    nbytes = sum(t.numel() * t.element_size() for t in items.values())

    d = tempfile.mkdtemp(prefix="loom-rl-bench-")
    daemon = subprocess.Popen([a.loom_state, "--dir", d, "--host-bytes",
                               str(nbytes + (64 << 20)), "--disk-bytes", "16M", "--quiet"])
    try:
        sock = os.path.join(d, "loom-state.sock")
        if not wait_socket(sock):
            raise SystemExit("loom-state did not start")
        c = state.Client(sock)
        want = {k: v.clone() for k, v in items.items()}
        t0 = time.perf_counter()
        off = c.offload(items, job="grpo", version=1)
        t_off = time.perf_counter() - t0
        back = {k: torch.empty_like(v) for k, v in items.items()}
        t0 = time.perf_counter()
        ld = c.load(back, job="grpo", version=1)
        t_load = time.perf_counter() - t0
        bad = [k for k in want if back[k].device != want[k].device or
               not torch.equal(back[k], want[k])]
        if bad:
            raise SystemExit(f"FAIL: {len(bad)} tensors differ after the round trip: {bad[:4]}")
        c.close()
    finally:
        daemon.terminate()
        daemon.wait()
        subprocess.run(["rm", "-rf", d])
    step = sorted(times[1:])[len(times[1:]) // 2]
    print(f"GRPO policy {size}: {G.n_params(model) / 1e6:.1f} M parameters on {dev}, batch "
          f"{len(prompts)} x {toks.shape[1]} tokens")
    print(f"  train step (median of {a.steps})      {step * 1e3:9.1f} ms")
    print(f"  trainer state (weights + Adam)      {nbytes / 2**20:9.1f} MiB")
    print(f"  offload to loom-state   {nbytes / t_off / 1e9:7.2f} GB/s  path {off.path}, "
          f"{off.buckets} requests")
    print(f"  load back               {nbytes / t_load / 1e9:7.2f} GB/s  path {ld.path}, found "
          f"{ld.found}; bit for bit on {dev}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
