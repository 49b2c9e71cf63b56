#!/usr/bin/env bash
# loom's GPU tests and benchmarks, run from a bundle (scripts/gpu-bundle.sh) or a build folder:
#
#   bash tests/gpu/run.sh BUNDLE          (make test-gpu BUNDLE=dir; or `make test-gpu` inside it)
#
# Each step prints its figures or "SKIP: <reason>" when this machine lacks what it needs (a CUDA
# runtime and device; torch with CUDA; transformers). Exit status: 1 when a step that could run
# failed, else 0. GPU_STATE_BYTES sets the bench's state size (default 4G); GPU_SYNC_MODEL the
# weight-sync bench's model (default qwen2.5-1.5b); PYTHON the Python.
set -uo pipefail
b=$(cd "${1:-.}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$b${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LOOM_STATE_LIB=$b/libloomstate.so LOOM_SYNC_LIB=$b/libloomsync.so LOOM_CLIENT_LIB=$b/libloomclient.so
py=$b/python
[ -d "$py" ] || py=$(cd "$here/../.." && pwd)/python
export PYTHONPATH=$py:$here${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-python3}  # the Python with torch (and transformers for the plan step)
fail=0
step() { echo; echo "== $*"; }
# Run a CUDA program: 0 when it ran, 1 when it said there is no CUDA (SKIP printed), else 2
# (fail set).
cuda_run() {
        local err rc
        err=$(mktemp)
        "$@" 2>"$err"
        rc=$?
        cat "$err" >&2
        if [ $rc -ne 0 ]; then
                if grep -q "no CUDA" "$err"; then
                        echo "SKIP: no CUDA runtime or device on this machine (the line above says which)"
                        rc=1
                else
                        fail=1
                        rc=2
                fi
        fi
        rm -f "$err"
        return $rc
}

step "loom-state bench --device cuda (offload/load vs pinned and pageable cudaMemcpy, switch)"
cuda_run "$b/loom-state" bench --device cuda --bytes "${GPU_STATE_BYTES:-4G}" --dir "${TMPDIR:-/tmp}"

step "loom.state with CUDA torch tensors (bf16 weights, fp32 Adam moments)"
"$PY" "$here/torch_state.py" "$b" || fail=1

step "weight sync from and to GPU memory: loom sync bench --device cuda, then --device host"
# publish + pull of a ${GPU_SYNC_MODEL:-qwen2.5-1.5b}-shaped model over loopback, per stage
if cuda_run "$b/loom" sync bench --device cuda --model "${GPU_SYNC_MODEL:-qwen2.5-1.5b}"; then
        "$b/loom" sync bench --device host --model "${GPU_SYNC_MODEL:-qwen2.5-1.5b}" || fail=1
fi

step "loom.weights with CUDA torch tensors (GPU publisher, GPU and host pullers)"
"$PY" "$here/torch_sync.py" || fail=1

step "GRPO trainer step and its Adam state through loom-state's CUDA tier"
ex=$b/examples/rl
[ -d "$ex" ] || ex=$(cd "$here/../.." && pwd)/examples/rl
"$PY" "$ex/gpu_bench.py" --loom-state "$b/loom-state" || fail=1

step "loom plan's cost model against measured Qwen3-shaped prefill, decode and train steps"
pv=$b/scripts/gpu/plan_validate.py
[ -f "$pv" ] || pv=$(cd "$here/../.." && pwd)/scripts/gpu/plan_validate.py
"$PY" "$pv" --loom "$b/loom" || fail=1

echo
[ $fail -eq 0 ] && echo "test-gpu: every step passed or was skipped with its reason" ||
        echo "test-gpu: a step FAILED (above)"
exit $fail
