#!/usr/bin/env bash
# What bench/sim2slurm.sh asks of `loom sim`: a trace's explicit job profiles (t_roll_s,
# t_train_s, iterations, slo), --sleep-phases (no state load, switch or tail), --boot-s (a
# provisioned node is billed from its request and runs nothing before it is up) and --launch-s
# (a worker starts that long after its nodes are up, its job's workers side by side), checked on the
# timeline; the columns' errors; and the bench's simulator-only mode. A second or two.
# Usage: sim2slurm_sim.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cat >"$d/t.csv" <<'EOF'
job_id,arrival_s,duration_s,gpus,t_roll_s,t_train_s,iterations,slo
a,0,1,8,3,2,4,1.5
b,100,1,8,5,1,3,1.2
c,200,1,8,2,2,2,2
EOF
sim() { "$build/loom" sim --trace "$d/t.csv" --rows 0:3 --policy loom,colocated --deterministic \
  --sleep-phases --json --no-progress "$@"; }
sim --timeline "$d/t0.jsonl" >"$d/r0.json"
sim --timeline "$d/t5.jsonl" --boot-s 5 >"$d/r5.json"
sim --timeline "$d/t7.jsonl" --boot-s 5 --launch-s 2 >"$d/r7.json"
# two jobs in one group: b joins a's lone group at 20 s with a rollout node
cat >"$d/g.csv" <<'EOF'
job_id,arrival_s,duration_s,gpus,t_roll_s,t_train_s,iterations,slo
a,0,1,8,6,2,8,2
b,20,1,8,6,2,8,2
EOF
"$build/loom" sim --trace "$d/g.csv" --rows 0:2 --policy loom --deterministic --sleep-phases \
  --json --no-progress --boot-s 5 --launch-s 2 --timeline "$d/tg.jsonl" >/dev/null
python3 - "$d" <<'EOF'
import json, sys
d = sys.argv[1]
fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok


def load(name):
    ev = [json.loads(line) for line in open(f"{d}/{name}")]
    secs, up, first = {}, {}, {}
    for o in ev:
        k = (o["policy"], o.get("pool"), o.get("node"))
        if o["ev"] == "node":
            if o["up"]:
                up[k] = o["t"]
            else:
                secs[o["policy"]] = secs.get(o["policy"], 0) + o["t"] - up.pop(k)
        if o["ev"] == "phase":
            first.setdefault((o["policy"], o["job"]), o)
    return ev, secs, first


work = {"a": 4 * (3 + 2), "b": 3 * (5 + 1), "c": 2 * (2 + 2)}  # seconds of phases per job
ev0, s0, f0 = load("t0.jsonl")
ev5, s5, f5 = load("t5.jsonl")
jobs = [o for o in ev0 if o["ev"] == "job" and o["policy"] == "loom"]
check([(o["iterations"], o["slo"]) for o in jobs] == [(4, 1.5), (3, 1.2), (2, 2.0)],
      "the trace's iterations and SLOs are the jobs' (not drawn)")
check(all(o["work"] == o["switch"] for o in ev0 if o["ev"] == "phase"),
      "--sleep-phases: no phase pays a switch or a state load")
check(not any(o["ev"] == "phase" and o["tail"] for o in ev0), "--sleep-phases: no tail")
check(s0["colocated"] == sum(work.values()) * 1e6,
      f"colocated node time is the phases' time exactly ({s0['colocated'] / 1e6} s)")
# the jobs do not overlap: each runs lone on one training node under loom as well
check(s0["loom"] == s0["colocated"], f"three lone jobs cost loom what they cost colocated")
check(s5["colocated"] == (sum(work.values()) + 3 * 5) * 1e6,
      f"--boot-s 5: each colocated job's node is billed 5 s more ({s5['colocated'] / 1e6} s)")
check(s5["loom"] == s5["colocated"], "--boot-s 5: and loom's lone jobs the same")
for j, arr in enumerate((0, 100, 200)):
    ph = f5[("loom", j)]
    check(ph["work"] == (arr + 5) * 1e6,
          f"--boot-s 5: job {j}'s first phase starts once its node is up ({ph['work'] / 1e6} s)")
# --launch-s 2: a lone job's two workers (its rollouts and its trainings, both on its training
# node) are launched side by side once the node is up, as loomd's executor does, and each is
# ready 2 s later: the first rollout waits for its worker, the first training (3 s later) does
# not; colocated jobs start as one process
ev7, s7, f7 = load("t7.jsonl")
check(s7["colocated"] == s5["colocated"], "--launch-s: colocated is not launched by loomd")
check(s7["loom"] == s5["loom"] + 3 * 2e6,
      f"--launch-s 2: one launch of 2 s per lone job ({(s7['loom'] - s5['loom']) / 1e6} s more)")
for j, arr in enumerate((0, 100, 200)):
    ph = [o for o in ev7 if o["ev"] == "phase" and o["policy"] == "loom" and o["job"] == j]
    waits = [(o["work"] - o["switch"]) / 1e6 for o in ph]
    check(ph[0]["work"] == (arr + 5 + 2) * 1e6 and not any(waits[1:]),
          f"--launch-s 2: job {j}'s first rollout waits for its worker, nothing after ({waits})")
# b's rollout worker starts on the new rollout node once it is up (25 s) and is ready at 27 s;
# a's rollout worker moves there from the training node when the group's placement names it,
# launched once the node is up as well: its first rollout there (after 27 s) waits for nothing
evg, _, _ = load("tg.jsonl")
rolls = [o for o in evg if o["ev"] == "phase" and o["phase"] == "rollout" and o["pool"] == "rollout"]
fb = next((o for o in rolls if o["job"] == 1), None)
fa = next((o for o in rolls if o["job"] == 0), None)
check(fb is not None and fa is not None, "a group: both jobs roll out on the rollout node")
if fb and fa:
    check(fb["switch"] == 20e6 and fb["work"] == 27e6,
          f"a joining job's first rollout waits for the node's boot and its worker ({fb['work'] / 1e6} s)")
    check(fa["switch"] >= 27e6 and fa["work"] == fa["switch"],
          f"a lone member's rollout worker, moved with its group, was launched once the new node "
          f"came up ({fa['switch'] / 1e6} s, ready at {fa['work'] / 1e6} s)")
r0 = {o["policy"]: o for o in map(json.loads, open(f"{d}/r0.json"))}
r5 = {o["policy"]: o for o in map(json.loads, open(f"{d}/r5.json"))}
check(r5["loom"]["total_cost"] > r0["loom"]["total_cost"], "a boot costs loom money")
sys.exit(1 if fails else 0)
EOF
bad() { # trace text, what the error must name
  printf '%b' "$1" >"$d/bad.csv"
  if "$build/loom" sim --trace "$d/bad.csv" --policy loom --no-progress >"$d/o" 2>"$d/e"; then
    echo "FAIL a bad trace was accepted: $1"; exit 1
  fi
  grep -q "$2" "$d/e" || { echo "FAIL the error does not name $2: $(cat "$d/e")"; exit 1; }
  echo "ok   rejected, naming $2: $(cat "$d/e")"
}
bad 'job_id,arrival_s,duration_s,gpus,t_roll_s,t_train_s,iterations\na,0,1,8,3,2,4\n' 'slo'
bad 'job_id,arrival_s,duration_s,gpus,t_roll_s,t_train_s,iterations,slo\na,0,1,8,-3,2,4,1.5\n' \
  'bad.csv:2:.*t_roll_s'
bad 'job_id,arrival_s,duration_s,gpus,t_roll_s,t_train_s,iterations,slo\na,0,1,8,3,2,4.5,1.5\n' \
  'iterations'
bad 'job_id,arrival_s,duration_s,gpus,t_roll_s,t_train_s,iterations,slo\na,0,1,8,3,2,4,0.5\n' \
  'slo'
if "$build/loom" sim --boot-s -1 --policy loom 2>"$d/e"; then
  echo "FAIL --boot-s -1 accepted"; exit 1
fi
grep -q -- "--boot-s" "$d/e" && echo "ok   --boot-s -1 refused: $(cat "$d/e")"
# --jitter F: each phase x U(1-F, 1+F), seeded: the same seed gives the same run, another seed
# another one, every phase within its bounds; only with --deterministic
jit() { sim --boot-s 5 --jitter 0.1 --seed "$1" --timeline "$d/j$1$2.jsonl" >/dev/null; }
jit 1 a && jit 1 b && jit 2 a
cmp -s "$d/j1a.jsonl" "$d/j1b.jsonl" && echo "ok   --jitter: the same seed, the same timeline" ||
  { echo "FAIL --jitter: one seed, two timelines"; exit 1; }
cmp -s "$d/j1a.jsonl" "$d/j2a.jsonl" && { echo "FAIL --jitter: seeds 1 and 2 ran alike"; exit 1; }
python3 - "$d/j1a.jsonl" <<'EOF'
import json, sys
decl = {0: {"rollout": 3, "train": 2}, 1: {"rollout": 5, "train": 1}, 2: {"rollout": 2, "train": 2}}
ph = [o for o in map(json.loads, open(sys.argv[1])) if o["ev"] == "phase" and o["policy"] == "loom"]
r = [(o["end"] - o["work"]) / 1e6 / decl[o["job"]][o["phase"]] for o in ph]
ok = ph and all(0.9 - 1e-6 <= x <= 1.1 + 1e-6 for x in r) and len(set(round(x, 4) for x in r)) > 3
print(("ok   " if ok else "FAIL ") + f"--jitter 0.1: phases took {min(r):.3f} to {max(r):.3f} of their declared times")
sys.exit(0 if ok else 1)
EOF
if "$build/loom" sim --jitter 0.1 --policy loom --no-progress 2>"$d/e" >/dev/null; then
  echo "FAIL --jitter without --deterministic accepted"; exit 1
fi
grep -q "jitter" "$d/e" && echo "ok   --jitter without --deterministic refused: $(cat "$d/e")"
# the bench's simulator-only mode prints its rows
bash "$src/bench/sim2slurm.sh" "$build" --only-sim --jobs 30 >"$d/bench.txt"
for row in "loom (c) loom sim" "loom (c) +-0.2s" "colocated (c) loom sim" "colocated / loom: sim"; do
  grep -q "^$row" "$d/bench.txt" || { echo "FAIL bench --only-sim: no '$row'"; cat "$d/bench.txt"; exit 1; }
done
echo "ok   bench/sim2slurm.sh --only-sim prints the simulator's rows"
