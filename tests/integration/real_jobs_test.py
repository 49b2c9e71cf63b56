"""Real GRPO jobs (examples/rl) under a real loomd, shortened for CI.

Two jobs with the same seed share the CPUs (rollout pool CPU 0, training pool CPU 1); the
rollout worker of the first is killed with SIGKILL in the middle of a rollout and restarted
by its launcher. Checks:

- every phase ran under a permit: each phase record names its own lease, and loomd granted
  exactly one lease per phase, plus the one the killed worker held;
- after every pull the rollout worker's weights (read back from its model) equal the bf16
  weights the trainer published for that version, bit for bit (SHA-256 on both sides);
- after the first step, sparse deltas are smaller than dense, and a puller that holds the
  previous version receives exactly the delta;
- the killed worker's job resumes from its last completed iteration: the restarted worker
  attaches taking over the rollout lease (loomd fails it and restarts the job at once, one
  restart counted), every rollout and every train step completes exactly once, loomd counts
  each iteration once, and the restarted worker's first pull is a dense catch-up;
- job a's trainer keeps its Adam state in a loom-state daemon between train permits (found
  in the host tier at every grant after the first), job b's in a file;
- the two jobs end with the same weights: co-scheduling, the kill and where the optimizer state
  lived changed when phases ran, not what they computed.
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
jobs = [loom.Job.submit(url, job_spec(n, 1.0, 1.0, 3.0, STEPS)) for n in ("a", "b")]
check(jobs[0].decision["group"] == jobs[1].decision["group"], "a and b share one group")
residency = {"a": ["--state-sock", sock], "b": ["--residency", "file"]}
procs = [subprocess.Popen([sys.executable, job_py, "launch", "--url", url, "--job", str(j.id),
                           "--name", n, "--dir", os.path.join(work, n)] + args + residency[n],
                          env=env)
         for j, n in zip(jobs, ("a", "b"))]

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
check(all(p.returncode == 0 for p in procs), "both launchers finished cleanly")

res = {n: json.load(open(os.path.join(work, n, "result.json"))) for n in ("a", "b")}


def records(n, role):
    return [json.loads(x) for x in open(os.path.join(work, n, f"{role}.jsonl"))]


for n, j in zip(("a", "b"), jobs):
    info = j.info()
    check(info["state"] == "finished" and info["iterations_done"] == STEPS,
          f"{n}: loomd counted {info['iterations_done']} of {STEPS} iterations, finished")
    tr = [r for r in records(n, "trainer") if r["event"] == "step"]
    ro = [r for r in records(n, "rollout") if r["event"] == "done"]
    check([r["it"] for r in tr] == list(range(STEPS)), f"{n}: each train step ran once")
    check([r["it"] for r in ro] == list(range(STEPS)), f"{n}: each rollout completed once")
    published = {r["version"]: r["digest"] for r in records(n, "trainer") if "digest" in r}
    check(all(r["pulled_digest"] == published[r["version"]] == r["model_digest"] for r in ro),
          f"{n}: after every pull the rollout model's bf16 weights equal the published ones")
    check(all(r["delta_bytes"] < r["dense_bytes"] for r in tr),
          f"{n}: sparse deltas smaller than dense after the first step "
          + ", ".join(f"{r['delta_bytes']}/{r['dense_bytes']} B ({r['density']:.0%})"
                      for r in tr))
    by_version = {r["version"]: r for r in tr}
    deltas = [r for r in ro if not r["pull_dense"]]
    check(deltas and all(r["pull_bytes"] == by_version[r["version"]]["delta_bytes"]
                         for r in deltas),
          f"{n}: a delta pull moves exactly the published delta")
    leases_train = {r["lease"] for r in tr}
    leases_roll = {r["lease"] for r in ro}
    check(len(leases_train) == STEPS and len(leases_roll) == STEPS
          and not leases_train & leases_roll and min(leases_train | leases_roll) > 0,
          f"{n}: every phase ran under its own lease")

_, metrics = d.req("GET", "/metrics")
granted = int(float(re.search(r'loom_leases_total\{event="granted"\} (\S+)', metrics).group(1)))
check(granted == 4 * STEPS + 1,
      f"loomd granted {granted} leases: {4 * STEPS} phases and the one the killed worker held")

ra = records("a", "rollout")
pids = [r["pid"] for r in ra if r["event"] == "done"]
restarted = [r for r in ra if r["event"] == "done" and r["pid"] != victim and r["it"] >= KILL_AT]
check(res["a"]["restarts"] == 1 and victim not in pids[KILL_AT:],
      "a: the launcher restarted the killed rollout worker once")
check(res["a"]["loomd"]["restarts"] == 1 and res["b"]["loomd"]["restarts"] == 0,
      "loomd restarted job a once (the takeover of its rollout lease) and b never")
check(restarted and restarted[0]["it"] == KILL_AT and restarted[0]["pull_dense"],
      f"a: the new worker resumed at rollout {KILL_AT} with a dense catch-up pull")
check(res["a"]["optimizer_found"] == [None] + ["host"] * (STEPS - 1)
      and res["b"]["optimizer_found"] == [None] + ["file"] * (STEPS - 1),
      "a's optimizer state came back from loom-state's host tier at every later grant, "
      "b's from its file")
check(res["a"]["final_digest"] == res["b"]["final_digest"],
      "a and b (same seed) end with bit-identical weights despite the kill and the sharing")
print(f"     rewards a {res['a']['rewards']}, held-out {res['a']['heldout_start']} -> "
      f"{res['a']['heldout_end']}")
