#!/usr/bin/env bash
# scripts/gpu/plan_validate.py without a GPU: loom plan's per-task predictions come out for every
# size (decode step = the layers' bf16 weights over the H100's HBM bandwidth, as docs/plan.md's
# decoding term says), the calibrate-then-report arithmetic gives 0 error when the measurements
# are the model times a constant and the right error otherwise, and without torch with CUDA the
# measuring run prints SKIP. Args: build dir, source dir.
set -euo pipefail
build=$1 src=$2
py=$(command -v python3)
out=$("$py" "$src/scripts/gpu/plan_validate.py" --loom "$build/loom" --predict-only)
echo "$out"
[ "$(grep -c '^B=' <<<"$out")" -eq 5 ]
"$py" - "$build/loom" "$src" <<'PY'
import sys
sys.path.insert(0, sys.argv[2] + "/scripts/gpu")
import plan_validate as p
pred = p.predict(sys.argv[1], "qwen3-1.7b", p.SIZES, False)
h, i, layers = 2048, 6144, 28
want = 2 * layers * (4 * h * h + 3 * h * i) / (p.H100["hbm_gbps"] * 1e9)
for s in p.SIZES:
    assert abs(pred[s]["decode"] - want) < 1e-3 * want, (s, pred[s]["decode"], want)
    assert pred[s]["train"] > 3 * pred[s]["prefill"], s   # 3x forward, on longer sequences
big = pred[(8, 1024, 128)]["prefill"] / pred[(8, 512, 128)]["prefill"]
assert 2.0 <= big < 2.2, big                                # twice the tokens, a little attention
meas = {s: {t: v * 1.7 for t, v in pred[s].items()} for s in p.SIZES}
assert all(e < 1e-12 for v in p.report(pred, meas, p.SIZES).values() for e in v)
meas[p.SIZES[1]]["train"] *= 1.25   # the model is 20% fast on one held-out size
errs = p.report(pred, meas, p.SIZES)
assert abs(max(errs["train"]) - 0.2) < 1e-9, errs
print("ok: predictions and the calibrated error arithmetic")
PY
if ! "$py" -c 'import torch, transformers, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
        "$py" "$src/scripts/gpu/plan_validate.py" --loom "$build/loom" | tee /dev/stderr | grep -q '^SKIP: '
fi
