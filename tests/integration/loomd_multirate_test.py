"""Multi-rate groups against a real loomd (docs/scheduling.md, "Multi-rate groups"):

- a policy file with a non-boolean policy.multirate is refused naming the field and line;
- L (8 s rollout, 2 s training, SLO 1.2) gets a group; S (0.6 s + 0.4 s, SLO 3) joins it at a
  rate r > 1: its decision, its job JSON and its group say so;
- workers that release every permit at once see the core's order: between two trainings of L,
  S trains exactly r times (r training and r rollout permits per meta-iteration), once the
  round in which L, alone until then, rolled out on its training node has passed;
- loomd is killed with SIGKILL and started again: both jobs keep their group and rates, and the
  permits go on in the same pattern;
- the data dir is refused by a loomd started with multirate off, with train_rightsize on, or
  with another rate_search_open (the policy fingerprint covers them), and taken by one started
  with rate_search_open at its default written out.
The workers release at once: the order, not the phase lengths, is what is checked.
"""

import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, job_spec  # noqa: E402

build, source = sys.argv[1], sys.argv[2]
loomd = os.path.join(build, "loomd")
tmp = tempfile.mkdtemp(prefix="loomd-multirate-")


def policy_file(name, policy):
    """A cluster file with the default cluster and this policy (JSON text)."""
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write('{"cluster": {},\n "policy": %s}\n' % policy)
    return path


try:
    bad = policy_file("policy.json", '{"multirate": "yes"}')
    p = subprocess.run([loomd, "--data-dir", tmp, "--cluster", bad], capture_output=True,
                       text=True)
    check(p.returncode == 1 and "policy.multirate" in p.stderr and ":2:" in p.stderr,
          f"a bad policy.multirate names the field and line ({p.stderr.strip()})")
    off = policy_file("off.json", '{"multirate": false}')
    rightsize = policy_file("rightsize.json", '{"train_rightsize": true}')
    wide = policy_file("wide.json", '{"rate_search_open": 8}')
    same = policy_file("same.json", '{"rate_search_open": 512}')
except BaseException:
    shutil.rmtree(tmp, True)
    raise

d = Loomd(build, "--lease-timeout", "60", "--quiet").start()
st, lj = d.req("POST", "/v1/jobs", job_spec("L", 8.0, 2.0, 1.2, 0))
check(st == 201 and lj["decision"]["decision"] == "new_group", "L gets a group")
st, sj = d.req("POST", "/v1/jobs", job_spec("S", 0.6, 0.4, 3.0, 0))
dec = sj["decision"]
rate = dec.get("rate", 1)
check(st == 201 and dec["group"] == lj["decision"]["group"] and rate > 1
      and f"at rate {rate}" in dec["reason"],
      f"S joins L's group at rate {rate}: {dec['reason']}")
check(d.req("GET", f"/v1/jobs/{sj['id']}")[1]["rate"] == rate
      and d.req("GET", f"/v1/jobs/{lj['id']}")[1]["rate"] == 1, "the job JSON shows the rates")


def drive(n_trains):
    """Release permits as they come; the sequence of (job, phase) granted."""
    seq = []
    while sum(1 for j, ph in seq if ph == "train") < n_trains:
        moved = False
        for jid in (lj["id"], sj["id"]):
            job = d.req("GET", f"/v1/jobs/{jid}")[1]
            if not job["permit"]:
                continue
            ph = job["next_phase"]
            st, lease = d.req("POST", f"/v1/jobs/{jid}/phases/{ph}/acquire?wait=1")
            if st != 200:
                continue
            st, _ = d.req("POST", f"/v1/leases/{lease['lease']}/release", {"status": "ok"})
            if st != 200:
                check(False, f"job {jid} releases {ph} ({st})")
            seq.append((jid, ph))
            moved = True
        if not moved:
            check(False, f"no permit is granted (after {seq})")
    return seq


def s_trains_between_l_trains(seq):
    trains = [j for j, ph in seq if ph == "train"]
    idx = [i for i, j in enumerate(trains) if j == lj["id"]]
    return [sum(1 for j in trains[a + 1:b] if j == sj["id"]) for a, b in zip(idx, idx[1:])]


seq = drive(7 * (rate + 1))
runs = s_trains_between_l_trains(seq)
# L was alone when S joined, its rollout running on the training node: once it ends L trains
# first, out of turn, and S's trainings of that round follow (the first gap is longer once)
check(len(runs) >= 4 and all(r == rate for r in runs[1:]) and rate <= runs[0] <= 2 * rate,
      f"between two trainings of L, S trains {rate} times (after the first round): {runs}")
rolls = sum(1 for j, ph in seq if j == sj["id"] and ph == "rollout")
trains = sum(1 for j, ph in seq if j == sj["id"] and ph == "train")
check(abs(rolls - trains) <= 1, f"S gets a rollout permit per training ({rolls}, {trains})")


def view():
    _, jobs = d.req("GET", "/v1/jobs")
    jobs = jobs["jobs"] if isinstance(jobs, dict) else jobs
    return sorted((j["id"], j["group"], j["rate"]) for j in jobs)


before = view()
d.kill9()
d.start()
after = view()
check(before == after, f"after kill -9 the jobs keep their groups and rates: {after}")
seq = drive(4 * (rate + 1))
runs = s_trains_between_l_trains(seq)
check(len(runs) >= 2 and all(r == rate for r in runs),
      f"after the restart S still trains {rate} times per meta-iteration: {runs}")
d.stop()

for path, what in ((off, "multirate off refuses the multi-rate data dir"),
                   (rightsize, "train_rightsize on refuses a data dir written with it off"),
                   (wide, "another rate_search_open refuses the data dir")):
    p = subprocess.run([loomd, "--data-dir", d.dir, "--cluster", path, "--quiet"],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode == 1 and "another policy" in p.stderr, f"{what} ({p.stderr.strip()[:120]})")
d2 = Loomd(build, "--cluster", same, "--quiet", data_dir=d.dir).start()
check(d2.req("GET", "/v1/cluster")[1]["policy"]["rate_search_open"] == 512,
      "the default written out (512) is the same policy, and /v1/cluster shows it")
d2.stop()
shutil.rmtree(tmp, True)
