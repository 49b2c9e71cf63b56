"""Real GRPO jobs (examples/rl) under a real loomd, shortened for CI.

Three jobs with the same seed share the CPUs (rollout pool CPU 0, training pool CPU 1). Job a's
rollout worker is killed with SIGKILL in the middle of a rollout by this test, and its trainer
once after saving a checkpoint but before releasing its lease; job b's trainer is killed three
times: right after an optimizer step (nothing published or saved), right after publishing the
new version (not yet saved), and in the middle of writing a checkpoint (the temporary file
complete, not renamed). The trainer kills are placed exactly
by examples/rl/job.py's $LOOM_RL_KILL hook (a SIGKILL the process sends itself at that point).
Job c is never killed. Every killed process is restarted by its launcher. Checks:

- every phase ran under a permit: each phase record names its own lease, and loomd granted
  exactly one lease per phase, plus the ones the killed processes held;
- after every pull the rollout worker's weights (read back from its model) equal the bf16
  weights the trainer published for that version, bit for bit (SHA-256 on both sides);
- after the first step, sparse deltas are smaller than dense, and a puller that holds the
  previous version receives exactly the delta;
- a killed process's job resumes from its last counted iteration: the restarted process
  attaches taking over its own phase's lease (loomd fails it and restarts the job at once, one
  restart counted), every train step completes exactly once, loomd counts each iteration once,
  a rollout is redone only for an iteration whose train was killed, and the restarted rollout
  worker's first pull is a dense catch-up;
- a restarted trainer loads the checkpoint of loomd's count (not a newer one it finds), and
  publishes that version again with the same bits; the rollout worker keeps its copy of it
  (verified against the new publisher's checksums, no dense re-pull); the rerun of the
  iteration writes a checkpoint identical to the one its killed predecessor had saved;
- job a's trainer keeps its checkpoint (and Adam state between permits) in a loom-state
  daemon (found in the host tier at every grant after the first), b's in files, c's in files
  with the Adam state kept in the process; a half-written checkpoint file is never used and is
  cleaned up;
- the three jobs end with the same weights: co-scheduling, the kills and where the trainer's
  state lived changed when phases ran, not what they computed.
"""

import atexit
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, import_setup, job_spec  # noqa: E402

build, source = sys.argv[1], sys.argv[2]
env = import_setup(build, source, LOOM_SYNC_LIB=os.path.join(build, "libloomsync.so"))
import loom  # noqa: E402

STEPS, KILL_AT = 4, 2
d = Loomd(build, "--lease-timeout", "30", "--quiet").start()
url = d.url()
work = os.path.join(d.dir, "jobs")
os.makedirs(work)
env["LOOM_T0"] = str(time.monotonic())
job_py = os.path.join(source, "examples", "rl", "job.py")
args = ["--task", "reverse", "--size", "s", "--steps", str(STEPS), "--seed", "7",
        "--warmup-steps", "3", "--prompts", "4", "--group", "8", "--eval-prompts", "16",
        "--cache", work]

# loom-state for job a's optimizer state
sdir = os.path.join(d.dir, "state")
sock = os.path.join(sdir, "loom-state.sock")
state_proc = subprocess.Popen([os.path.join(build, "loom-state"), "--dir", sdir, "--host-bytes",
                               "64M", "--disk-bytes", "64M", "--no-mlock", "--quiet"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
atexit.register(lambda: (state_proc.poll() is None and state_proc.kill(), state_proc.wait()))
for _ in range(500):
    if os.path.exists(sock):
        break
    time.sleep(0.02)
check(os.path.exists(sock), "loom-state serves")

# The warm-up (cached in work/, shared by both jobs: same seed) before the jobs exist: a
# submitted job's first permit expires unless claimed within one lease timeout.
subprocess.run([sys.executable, job_py, "launch", "--warmup-only", "--dir", work] + args,
               env=env, check=True)
NAMES = ("a", "b", "c")
jobs = [loom.Job.submit(url, job_spec(n, 1.0, 1.0, 3.0, STEPS)) for n in NAMES]
check(jobs[0].decision["group"] == jobs[1].decision["group"], "a and b share one group")
residency = {"a": ["--state-sock", sock], "b": ["--residency", "file", "--max-restarts", "3"],
             "c": ["--residency", "keep"]}
# trainer kills (job.py's $LOOM_RL_KILL): the j-th entry kills the j-th trainer process
kills = {"a": "trainer:release:1", "b": "trainer:step:1,trainer:publish:2,trainer:checkpoint:3",
         "c": ""}
killed_trains = {n: sorted(int(k.split(":")[2]) for k in v.split(",") if k)
                 for n, v in kills.items()}
procs = [subprocess.Popen([sys.executable, job_py, "launch", "--url", url, "--job", str(j.id),
                           "--name", n, "--dir", os.path.join(work, n)] + args + residency[n],
                          env=dict(env, LOOM_RL_KILL=kills[n]))
         for j, n in zip(jobs, NAMES)]

# Kill job a's rollout worker in the middle of rollout KILL_AT (it holds the lease).
log_a = os.path.join(work, "a", "rollout.jsonl")
victim, t_end = None, time.monotonic() + 300
while victim is None and time.monotonic() < t_end:
    if os.path.exists(log_a):
        for line in open(log_a):
            r = json.loads(line)
            if r["event"] == "start" and r["it"] == KILL_AT:
                victim = r["pid"]
    if procs[0].poll() is not None:
        check(False, "job a is still running before the kill")
    time.sleep(0.01)
check(victim is not None, f"job a's rollout worker reached rollout {KILL_AT}")
os.kill(victim, signal.SIGKILL)
print(f"     killed rollout worker pid {victim} during rollout {KILL_AT}")
for p in procs:
    p.wait(timeout=600)
check(all(p.returncode == 0 for p in procs), "the three launchers finished cleanly")

res = {n: json.load(open(os.path.join(work, n, "result.json"))) for n in NAMES}


def records(n, role):
    return [json.loads(x) for x in open(os.path.join(work, n, f"{role}.jsonl"))]


for n, j in zip(NAMES, jobs):
    info = j.info()
    check(info["state"] == "finished" and info["iterations_done"] == STEPS,
          f"{n}: loomd counted {info['iterations_done']} of {STEPS} iterations, finished")
    tr = [r for r in records(n, "trainer") if r["event"] == "step"]
    ro = [r for r in records(n, "rollout") if r["event"] == "done"]
    check([r["it"] for r in tr] == list(range(STEPS)), f"{n}: each train step ran once")
    check(sorted(r["it"] for r in ro) == sorted(list(range(STEPS)) + killed_trains[n]),
          f"{n}: each rollout completed once, and once more for each killed train "
          f"{killed_trains[n]}")
    published = {r["version"]: r["digest"] for r in records(n, "trainer") if "digest" in r}
    check(all(r["pulled_digest"] == published[r["version"]] == r["model_digest"] for r in ro),
          f"{n}: after every pull the rollout model's bf16 weights equal the published ones")
    check(res[n]["republished_same"],
          f"{n}: every trainer process that published a version published the same bits")
    check(all(r["delta_bytes"] < r["dense_bytes"] for r in tr),
          f"{n}: sparse deltas smaller than dense after the first step "
          + ", ".join(f"{r['delta_bytes']}/{r['dense_bytes']} B ({r['density']:.0%})"
                      for r in tr))
    by_version = {r["version"]: r for r in tr}
    seen, repulls, deltas = set(), [], []
    for r in ro:
        (repulls if r["it"] in seen else deltas if not r["pull_dense"] else []).append(r)
        seen.add(r["it"])
    check(deltas and all(r["pull_bytes"] == by_version[r["version"]]["delta_bytes"]
                         for r in deltas),
          f"{n}: a delta pull moves exactly the published delta")
    check(len(repulls) == len(killed_trains[n]) and (repulls or not killed_trains[n])
          and all(not r["pull_dense"] and r["pull_changed"] == 0 for r in repulls),
          f"{n}: after each of the {len(killed_trains[n])} trainer restarts the rollout worker "
          "kept its copy of the version (checksums matched the new publisher's), no dense re-pull"
          if killed_trains[n] else f"{n}: no trainer restart, no rollout redone")
    leases_train = {r["lease"] for r in tr}
    leases_roll = {r["lease"] for r in ro}
    check(len(leases_train) == STEPS and len(leases_roll) == len(ro)
          and not leases_train & leases_roll and min(leases_train | leases_roll) > 0,
          f"{n}: every phase ran under its own lease")
    params = 103424
    check(all(b >= 12 * params for b in res[n]["ckpt_bytes"]),
          f"{n}: a checkpoint (fp32 weights + Adam moments, >= 12 B/parameter) at every permit "
          f"end: {res[n]['ckpt_bytes'][0]} B, "
          f"{max(res[n]['ckpt_s']) * 1e3:.0f} ms at most ({res[n]['optimizer_residency']})")
    check(res[n]["restarts"] == {"rollout": int(n == "a"), "trainer": len(killed_trains[n])}
          and res[n]["trainer_resumed_at"] == killed_trains[n],
          f"{n}: the launcher restarted the killed processes; each restarted trainer resumed "
          f"at the iteration it was killed in: {res[n]['trainer_resumed_at']}")
    check(res[n]["loomd"]["restarts"] == int(n == "a") + len(killed_trains[n]),
          f"{n}: loomd restarted the job {res[n]['loomd']['restarts']} times (one per lease "
          "taken over)")

_, metrics = d.req("GET", "/metrics")
granted = int(float(re.search(r'loom_leases_total\{event="granted"\} (\S+)', metrics).group(1)))
phases = 2 * STEPS * len(NAMES) + 2 * sum(len(v) for v in killed_trains.values())
check(granted == phases + 1,
      f"loomd granted {granted} leases: {phases} phases (a rollout and a train redone per "
      "killed train) and the one the killed rollout worker held")

ra = records("a", "rollout")
restarted = [r for r in ra if r["event"] == "done" and r["pid"] != victim and r["it"] >= KILL_AT]
check(not [r for r in ra if r["event"] == "done" and r["pid"] == victim and r["it"] >= KILL_AT]
      and res["a"]["restarts"]["rollout"] == 1,
      "a: the launcher restarted the killed rollout worker once; the killed one finished nothing "
      "after the kill")
check(restarted and restarted[0]["it"] == KILL_AT and restarted[0]["pull_dense"],
      f"a: the new worker resumed at rollout {KILL_AT} with a dense catch-up pull")
ta = [r for r in records("a", "trainer") if r["event"] == "step"]
check(ta[1]["ckpt_verified"],
      "a: the rerun of iteration 1 saved the very checkpoint its killed predecessor had left in "
      "loom-state (ahead of loomd's count, not used to resume)")
left = sorted(os.listdir(os.path.join(work, "b")))
check([x for x in left if x.startswith("ckpt-")] == [f"ckpt-{STEPS:05d}.pt"],
      f"b: the half-written checkpoint was not used and is gone; the last one remains "
      f"({[x for x in left if x.startswith('ckpt-')]})")
check(res["a"]["optimizer_found"] == [None] + ["host"] * (STEPS - 1)
      and res["b"]["optimizer_found"] == [None] + ["file"] * (STEPS - 1),
      "a's optimizer state came back from loom-state's host tier at every later grant, "
      "b's from its file")
check(res["a"]["final_digest"] == res["b"]["final_digest"] == res["c"]["final_digest"],
      "a and b, killed, end with weights bit-identical to c's, never killed (same seed)")
print(f"     rewards a {res['a']['rewards']}, held-out {res['a']['heldout_start']} -> "
      f"{res['a']['heldout_end']}")

# A trainer resumes only from the checkpoint of loomd's count, made by this very job: restore()
# (what a restarted trainer runs) on the finished jobs' checkpoints.
sys.path.insert(0, os.path.join(source, "examples", "rl"))
import copy  # noqa: E402

import torch  # noqa: E402

import grpo as G  # noqa: E402
import job as J  # noqa: E402

G.setup_torch()


def trainer_state(n, **change):
    cfg = dict(J.load_cfg(os.path.join(work, n)), **change)
    model, _ = J.warm_policy(cfg, G)
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    return J.TrainerState(model, opt, copy.deepcopy(model), cfg, cfg["dir"],
                          key=f"{cfg['name']}-{cfg['job']}")


def refusal(ts, n):
    try:
        ts.restore(n)
    except J.CheckpointError as err:
        return str(err)
    return None


for n in ("a", "b"):
    ts = trainer_state(n)
    hdr = ts.restore(STEPS)
    digest = loom.weights.digest(loom.weights.bf16_bits(ts.params))
    check(hdr["iteration"] == STEPS and digest == hdr["digest"] == res[n]["final_digest"],
          f"{n}: checkpoint {STEPS} restores the final weights bit for bit")
    why = refusal(trainer_state(n), STEPS + 1)
    check(why is not None and f"newest is iteration {STEPS}, behind loomd's count" in why,
          f"{n}: a checkpoint behind loomd's count is refused: {why}")
why = refusal(trainer_state("b"), 2)
check(why is not None and "no checkpoint of iteration 2" in why,
      f"b: a missing checkpoint is refused: {why}")
why = refusal(trainer_state("b", lr=2e-3), STEPS)
check(why is not None and "config is" in why and "refusing" in why,
      f"b: another job's checkpoint (a different learning rate) is refused: {why}")

# A job's weights are published under its model id ("job <id>"). A rollout worker whose endpoint
# file names another job's publisher (its own trainer died and another took the port) refuses
# it, keeps its weights, and takes its own trainer's publisher as soon as the file names it.
import threading  # noqa: E402

import numpy as np  # noqa: E402

W = loom.weights
ep = os.path.join(d.dir, "swap.endpoint")
bits = np.arange(100, dtype=np.uint16)
foreign = W.Publisher([64, 36], model=jobs[1].model_id, endpoint_file=ep)
foreign.publish(1, bits)
puller = W.Puller(ep, [64, 36], model=jobs[0].model_id)
held = np.full(100, 7, dtype=np.uint16)
try:
    puller.pull(held, 1, timeout_s=1.0)
    err = None
except W.SyncError as e:
    err = e
check(err is not None and err.field == "model" and f"'{jobs[1].model_id}'" in str(err),
      f"another job's publisher is refused by model id: {err}")
check((held == 7).all() and puller.version is None, "nothing of it was applied")
own = W.Publisher([64, 36], model=jobs[0].model_id)
own.publish(1, bits + 1)


def repoint():
    with open(ep + ".tmp", "w") as f:
        f.write(own.endpoint + "\n")
    os.replace(ep + ".tmp", ep)


threading.Timer(0.5, repoint).start()
st = puller.pull(held, 1, timeout_s=10)
check(st["version"] == 1 and st["dense"] and (held == bits + 1).all(),
      "the worker takes its own trainer's publisher once the endpoint file names it")
foreign.close()
own.close()
