"""`loom plan --emit-job` -> loomd -> phases -> planned vs observed.

A demo-sized GRPO workflow (Qwen3-4B shapes, 16 prompts x 4 responses, 512/256 tokens) is
planned on examples/plan/small-12-regions.json; its spec goes to a live loomd through the
Python client, and a worker runs three iterations. No GPU is here: each phase is emulated by
CPU work lasting the plan's predicted time times a known factor (rollout 0.8, train 0.9, as a
worst-case plan should over-estimate). The job's JSON must then show, per phase, the plan's
time as `planned_s` and the observed lease lengths, their ratio near the factor.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, import_setup  # noqa: E402

build, source = sys.argv[1], sys.argv[2]
import_setup(build, source)
import loom  # noqa: E402

FACTOR = {"rollout": 0.8, "train": 0.9}
ITERS = 3

tmp = tempfile.mkdtemp(prefix="plan-bridge-")
wf = os.path.join(tmp, "workflow.json")
with open(wf, "w") as f:
    json.dump({"algorithm": "grpo", "model": "qwen3-4b", "seq_in": 512, "seq_out": 256,
               "batch": 16, "responses": 4}, f)
out = subprocess.run([os.path.join(build, "loom"), "plan", "--cluster",
                      os.path.join(source, "examples/plan/small-12-regions.json"),
                      "--workflow", wf, "--budget", "20000", "--emit-job", "--slo", "2"],
                     capture_output=True, text=True)
check(out.returncode == 0, "emit-job exits 0 " + out.stderr)
spec = json.loads(out.stdout)
check(0.1 < spec["t_roll_s"] < 3 and 0.1 < spec["t_train_s"] < 3, f"demo-sized phases {spec}")
spec["iterations"] = ITERS
spec["name"] = "planned"

d = Loomd(build, "--drift-window", "2", "--quiet").start()
try:
    job = loom.Job.submit(d.url(), spec)
    st, info = d.req("GET", f"/v1/jobs/{job.id}")
    check(st == 200 and info["state"] in ("queued", "running"), f"loomd admits the job {info}")

    def burn(seconds):
        t_end = time.monotonic() + seconds
        x = 0
        while time.monotonic() < t_end:
            x += 1
        return x

    @job.phase("rollout")
    def rollout():
        burn(spec["t_roll_s"] * FACTOR["rollout"])

    @job.phase("train")
    def train():
        burn(spec["t_train_s"] * FACTOR["train"])

    while not job.done:
        rollout()
        train()
    st, info = d.req("GET", f"/v1/jobs/{job.id}")
    check(info["state"] == "finished" and info["iterations_done"] == ITERS, "job finished")
    obs = info["observed"]
    print(f"{'phase':8} {'planned_s':>10} {'observed_s':>10} {'ratio':>6}")
    for phase, t_plan in (("rollout", spec["t_roll_s"]), ("train", spec["t_train_s"])):
        o = obs[phase]
        print(f"{phase:8} {o['planned_s']:10.3f} {o['last_s']:10.3f} {o.get('ratio', 0):6.3f}")
        check(abs(o["planned_s"] - t_plan) <= 1e-3 * t_plan + 1e-6,
              f"{phase}: planned_s is the plan's prediction {o}")
        check(o["samples"] == ITERS, f"{phase}: every iteration observed {o}")
        # The lease spans the emulated work plus permit round trips: at least the work, and
        # well below the plan on this idle machine's scale.
        check(FACTOR[phase] * 0.98 <= o.get("ratio", 0) <= FACTOR[phase] + 0.25,
              f"{phase}: observed ratio near {FACTOR[phase]} {o}")
finally:
    d.stop()
print("plan_bridge: ok")
