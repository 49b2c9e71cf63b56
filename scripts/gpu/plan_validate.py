"""loom plan's cost model against a real GPU: Qwen3-shaped models with random weights (built
from a transformers config, nothing downloaded) are timed at a few batch and sequence sizes, for
a prefill, a decode step and a training step (forward + backward), and compared with the
per-task costs `loom plan --json` predicts for the same model on one GPU of type H100.

As HetRL's estimation-accuracy figure does, the model's efficiency factors are calibrated on one
set of sizes (the first) and the error is reported on the others: one factor each for prefill
(achieved / peak TFLOPS), training (the same, for 3x the forward FLOPs) and decoding (achieved
/ peak HBM bandwidth). The cost model counts the transformer layers only; the measured times
include the embedding and the LM head (--vocab shrinks it).

    python3 scripts/gpu/plan_validate.py --loom build/loom                 # on a GPU
    python3 scripts/gpu/plan_validate.py --loom build/loom --predict-only  # anywhere

How loom plan is asked: a one-GPU cluster file (the H100 figures below in gpu_types unless
--builtin-h100) and, per size, a workflow file with batch B, one response, micro-batch B and
decoding batch B, so every task runs once on B sequences:
    prefill      actor_generation compute_s   (B x seq_in)
    decode step  actor_generation hbm_s / seq_out
    train step   actor_training compute_s     (B x (seq_in + seq_out), forward + backward)
Without torch with CUDA and transformers (and without --predict-only) it prints SKIP and
exits 0.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MODELS = {  # Qwen3 configs: hidden, intermediate, layers, heads, kv_heads, head_dim
    "qwen3-0.6b": (1024, 3072, 28, 16, 8, 128),
    "qwen3-1.7b": (2048, 6144, 28, 16, 8, 128),
    "qwen3-4b": (2560, 9728, 36, 32, 8, 128),
}
# H100 SXM: dense bf16 TFLOPS, HBM GB, HBM GB/s, NVLink GB/s per direction
H100 = {"tflops": 989, "hbm_gb": 80, "hbm_gbps": 3350, "intra_gbps": 450}
SIZES = [(8, 512, 128), (4, 1024, 256), (16, 256, 64), (8, 1024, 128), (2, 2048, 256)]


def predict(loom, model, sizes, builtin):
    """{size: {"prefill": s, "decode": s, "train": s}} from loom plan's per-task costs."""
    h, i, layers, heads, kv, hd = MODELS[model]
    out = {}
    with tempfile.TemporaryDirectory() as d:
        cluster = {"name": "one H100",
                   "devices": [{"type": "H100", "machine": "h100-1", "region": "r", "count": 1}]}
        if not builtin:
            cluster["gpu_types"] = {"H100": H100}
        cf = os.path.join(d, "cluster.json")
        with open(cf, "w") as f:
            json.dump(cluster, f)
        for (b, sin, sout) in sizes:
            wf = os.path.join(d, "wf.json")
            with open(wf, "w") as f:
                json.dump({"algorithm": "grpo", "mode": "sync", "seq_in": sin, "seq_out": sout,
                           "batch": b, "responses": 1, "micro_batch": b, "max_decode_batch": b,
                           "model": {"hidden": h, "intermediate": i, "layers": layers,
                                     "heads": heads, "kv_heads": kv, "head_dim": hd}}, f)
            r = subprocess.run([loom, "plan", "--cluster", cf, "--workflow", wf, "--solver",
                                "exact", "--json"], capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"loom plan failed for {(b, sin, sout)}: {r.stderr.strip()}")
            tasks = {t["task"]: t for t in json.loads(r.stdout)["plan"]["tasks"]}
            gen, train = tasks["actor_generation"], tasks["actor_training"]
            out[(b, sin, sout)] = {"prefill": gen["compute_s"], "decode": gen["hbm_s"] / sout,
                                   "train": train["compute_s"]}
    return out


def timed(fn, reps):
    import torch
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def build(model, vocab, max_len):
    """A random-weight Qwen3 of `model`'s shape, built once, in bf16, directly on the GPU (a
    1.7B model initialised on the CPU takes minutes, once per size)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config
    h, i, layers, heads, kv, hd = MODELS[model]
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=h, intermediate_size=i,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv, head_dim=hd, max_position_embeddings=max_len)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            return AutoModelForCausalLM.from_config(cfg)
    finally:
        torch.set_default_dtype(torch.float32)


def measure(m, size, vocab, reps, decode_steps):
    """{"prefill", "decode", "train"} seconds of the model `m` at `size`."""
    import torch
    b, sin, sout = size
    g = torch.Generator(device="cuda").manual_seed(0)
    ids = torch.randint(0, vocab, (b, sin), device="cuda", generator=g)

    def fwd(x, **kw):
        try:
            return m(x, logits_to_keep=1, **kw)
        except TypeError:  # transformers before logits_to_keep
            return m(x, **kw)

    with torch.no_grad():
        m.eval()
        prefill = timed(lambda: fwd(ids, use_cache=False), reps)
        out = fwd(ids, use_cache=True)
        pkv = out.past_key_values
        nxt = out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(decode_steps):
            out = fwd(nxt, past_key_values=pkv, use_cache=True)
            pkv, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        decode = (time.perf_counter() - t0) / decode_steps
        del out, pkv
    m.train()
    tids = torch.randint(0, vocab, (b, sin + sout), device="cuda", generator=g)

    def step():
        m(tids, labels=tids).loss.backward()
        m.zero_grad(set_to_none=True)

    train = timed(step, reps)  # each step leaves no gradients behind
    torch.cuda.empty_cache()
    return {"prefill": prefill, "decode": decode, "train": train}


def report(pred, meas, sizes):
    """Calibrate on sizes[0], print every size's measured, modelled and calibrated times and the
    error on the others; returns {task: [abs error on held-out sizes]}."""
    eff = {t: pred[sizes[0]][t] / meas[sizes[0]][t] for t in ("prefill", "decode", "train")}
    print(f"calibrated on B={sizes[0][0]} seq_in={sizes[0][1]} seq_out={sizes[0][2]}: "
          f"prefill {eff['prefill']:.1%} of peak TFLOPS, training {eff['train']:.1%}, "
          f"decoding {eff['decode']:.1%} of peak HBM bandwidth")
    print(f"{'B':>3} {'in':>5} {'out':>4}  {'task':<8} {'measured ms':>11} {'model ms':>9} "
          f"{'calibr. ms':>10} {'error':>7}")
    errs = {t: [] for t in eff}
    for k, s in enumerate(sizes):
        for t in ("prefill", "decode", "train"):
            cal = pred[s][t] / eff[t]
            err = (cal - meas[s][t]) / meas[s][t]
            if k:
                errs[t].append(abs(err))
            print(f"{s[0]:>3} {s[1]:>5} {s[2]:>4}  {t:<8} {meas[s][t] * 1e3:11.2f} "
                  f"{pred[s][t] * 1e3:9.2f} {cal * 1e3:10.2f} "
                  f"{'(calib)' if not k else f'{err:+7.1%}'}")
    for t, e in errs.items():
        if e:
            print(f"{t}: mean |error| {statistics.mean(e):.1%}, max {max(e):.1%} over "
                  f"{len(e)} held-out sizes")
    return errs


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--loom", default="loom", help="the loom program")
    p.add_argument("--model", default="qwen3-1.7b", choices=sorted(MODELS))
    p.add_argument("--vocab", type=int, default=151936, help="vocabulary (Qwen3: 151936)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--decode-steps", type=int, default=32)
    p.add_argument("--predict-only", action="store_true", help="print loom plan's per-task "
                   "predictions for the sizes, measure nothing (needs no GPU)")
    p.add_argument("--builtin-h100", action="store_true", help="use loom plan's own H100 "
                   "figures instead of the ones above")
    p.add_argument("--json", help="also write every figure to this file")
    a = p.parse_args(argv)
    pred = predict(a.loom, a.model, SIZES, a.builtin_h100)
    if a.predict_only:
        print(f"loom plan's per-task predictions, {a.model} shape on one H100")
        for s in SIZES:
            print(f"B={s[0]:<3} seq_in={s[1]:<5} seq_out={s[2]:<4} " +
                  "  ".join(f"{t} {pred[s][t] * 1e3:8.3f} ms" for t in pred[s]))
        return 0
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as err:
        print(f"SKIP: {err} (plan_validate needs torch with CUDA and transformers)")
        return 0
    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        return 0
    print(f"{a.model} shape, random weights, bf16, on {torch.cuda.get_device_name(0)}", flush=True)
    t0 = time.perf_counter()
    m = build(a.model, a.vocab, max(sin + sout for (_, sin, sout) in SIZES) + a.decode_steps + 8)
    print(f"model built on the GPU in {time.perf_counter() - t0:.1f} s", flush=True)
    meas = {}
    for s in SIZES:
        meas[s] = measure(m, s, a.vocab, a.reps, a.decode_steps)
        print(f"measured B={s[0]} seq_in={s[1]} seq_out={s[2]}: " +
              "  ".join(f"{t} {meas[s][t] * 1e3:.2f} ms" for t in meas[s]), flush=True)
    errs = report(pred, meas, SIZES)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "sizes": SIZES,
                       "predicted": [pred[s] for s in SIZES],
                       "measured": [meas[s] for s in SIZES], "abs_error": errs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
