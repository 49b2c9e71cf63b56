#!/usr/bin/env bash
# The GRPO example's device option on a CPU-only machine: a trainer step of the policy and its
# Adam state through loom-state (host path, bit for bit) with --device cpu; --device cuda says
# why it skips; a bad --device is refused. Args: build dir, source dir.
set -euo pipefail
build=$1 src=$2
py=/usr/bin/python3
. "$src/tests/integration/lib/py.sh"
need_py "$py" "torch, numpy"
san_preload "$build/libloomstate.so"
export LOOM_STATE_LIB=$build/libloomstate.so
out=$("$py" "$src/examples/rl/gpu_bench.py" --loom-state "$build/loom-state" --device cpu \
        --size s --steps 1 --prompts 2 --group 4)
echo "$out"
grep -q "path emulated, found host; bit for bit on cpu" <<<"$out"
if ! "$py" -c 'import torch, sys; sys.exit(torch.cuda.is_available())'; then
        out=$(env -u LD_PRELOAD "$py" "$src/examples/rl/gpu_bench.py" --loom-state "$build/loom-state" \
                --device cuda)
        echo "$out"
        grep -q "^SKIP: device cuda: torch sees no CUDA device" <<<"$out"
fi
set +e
"$py" "$src/examples/rl/job.py" launch --warmup-only --dir /tmp --device tpu 2>/tmp/rl-dev.$$
rc=$?
set -e
grep -q "device: cpu, cuda or auto, not 'tpu'" /tmp/rl-dev.$$ && [ $rc -eq 2 ]
rm -f /tmp/rl-dev.$$
echo "ok: --device tpu refused with exit 2"
