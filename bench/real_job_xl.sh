#!/usr/bin/env bash
# One larger real GRPO job under loomd: examples/rl at --size xl (3.17 M parameters, 4 layers of
# width 256) on `reverse`, with a 4-step supervised warm-up so that GRPO starts from a weak
# policy. Prints the held-out reward (sampled and greedy, 128 prompts never trained on) before
# and after, the training reward of the first and last step, and the seconds per iteration. The
# learning figures are deterministic for the seed; the timings are of one run on whatever else
# the machine runs. Needs /usr/bin/python3 with torch and numpy.
# Usage: bench/real_job_xl.sh BUILD_DIR [STEPS]
set -euo pipefail
b=$(cd "${1:-build}" && pwd)
steps=${2:-20}
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
tmp=$(mktemp -d)
lpid=
cleanup() {
        [ -n "$lpid" ] && kill "$lpid" 2>/dev/null && wait "$lpid" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
"$b/loomd" --data-dir "$tmp/d" --listen 127.0.0.1:0 --port-file "$tmp/port" \
        --lease-timeout 120 --quiet &
lpid=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
url=http://127.0.0.1:$(cat "$tmp/port")
export PYTHONPATH="$src/python" LOOM_CLIENT_LIB="$b/libloomclient.so" \
        LOOM_SYNC_LIB="$b/libloomsync.so"
args=(--task reverse --size xl --steps "$steps" --seed 1 --lr 3e-4 --warmup-steps 4
        --cache "$tmp/cache")
t0=$(date +%s.%N)
"$py" "$src/examples/rl/job.py" launch --warmup-only --dir "$tmp/w" "${args[@]}" >/dev/null
t1=$(date +%s.%N)
id=$(curl -sf -XPOST "$url/v1/jobs" -d "{\"name\":\"xl\",\"rollout_gpus\":8,\"train_gpus\":8,\
\"t_roll_s\":60,\"t_train_s\":60,\"slo\":3,\"iterations\":$steps}" |
        "$py" -c 'import json, sys; print(json.load(sys.stdin)["id"])')
"$py" "$src/examples/rl/job.py" launch --url "$url" --job "$id" --name xl --dir "$tmp/xl" \
        "${args[@]}" >/dev/null
"$py" - "$tmp/xl/result.json" "$t0" "$t1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
(s0, g0), (s1, g1) = r["heldout_start"], r["heldout_end"]
print(f"size xl, {r['steps']} steps: held-out reward sampled {s0:.3f} -> {s1:.3f}, "
      f"greedy {g0:.3f} -> {g1:.3f}; training reward {r['rewards'][0]:.3f} -> "
      f"{r['rewards'][-1]:.3f}")
print(f"warm-up {float(sys.argv[3]) - float(sys.argv[2]):.1f} s; {r['wall_s'] / r['steps']:.2f} s per iteration "
      f"(rollout {r['busy_rollout_s'] / r['steps']:.2f} s, train {r['busy_train_s'] / r['steps']:.2f} s); "
      f"pulls bit-exact: {r['pulls_bit_exact']}")
PY
