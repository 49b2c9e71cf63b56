"""A toy RL job under loomd, in the package's programming model.

    loomd --data-dir /tmp/loom &
    PYTHONPATH=python LOOM_BUILD_DIR=build python3 python/examples/toy_rl_job.py

The rollout "generates" responses of random length and reports progress after each; when
loomd advises tail migration it would shrink onto the GPUs it keeps. Training does work
proportional to the tokens generated. State stays in this process between phases.
"""

import random
import sys

import loom

url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:7480"
job = loom.Job.submit(url, {"name": "toy", "rollout_gpus": 8, "train_gpus": 8,
                            "t_roll_s": 2.0, "t_train_s": 1.0, "slo": 1.5, "iterations": 3})
print(f"job {job.id}: {job.decision['decision']} in group {job.decision['group']}")
rng = random.Random(0)
tokens = []


@job.phase("rollout", warm_start=lambda lease: print(f"  rollout on nodes {lease.nodes}"))
def rollout():
    tokens.clear()
    for i in range(32):
        tokens.append(sum(rng.random() for _ in range(int(rng.paretovariate(1.0) * 200))))
        advice = job.progress(i + 1, 32)
        if advice.migrate_tail:
            print(f"  tail -> {advice.keep_gpus} GPU")


@job.phase("train")
def train():
    return sum(t * t for t in tokens)


while not job.done:
    rollout()
    loss = train()
    print(f"  iteration done, loss {loss:.1f}")
print(job.info()["state"])
