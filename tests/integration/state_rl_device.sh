#!/usr/bin/env bash
# The GRPO example's device option on a CPU-only machine: a trainer step of the policy and its
# Adam state through loom-state (host path, bit for bit) with --device cpu; --device cuda says
# why it skips; a bad --device is refused. Args: build dir, source dir.
set -euo pipefail
build=$1 src=$2
py=/usr/bin/python3
if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
        echo "SKIP: torch (or numpy) not importable from $py"
        exit 77
fi
pre=$(ldd "$build/libloomstate.so" | awk '/lib(a|ub)san\.so/ {print $3}' | paste -sd: -)
if [ -n "$pre" ]; then
        export LD_PRELOAD=$pre ASAN_OPTIONS=detect_leaks=0
fi
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
