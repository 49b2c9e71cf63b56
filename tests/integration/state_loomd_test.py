"""loomd wired to loom-state (--state SOCK): prefetch hints from the dispatch order and
host-tier accounting from loom-state's measured usage. Run by state_loomd.sh."""

import json
import os
import subprocess
import sys
import tempfile

build, source = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, job_spec, wait_unix_socket  # noqa: E402

tmp = tempfile.mkdtemp(prefix="loom-state-loomd-")
sock = os.path.join(tmp, "s.sock")
# 1 GB decimal host tier on the "node" (the cluster below says 1 GB of host memory per node)
st = subprocess.Popen([os.path.join(build, "loom-state"), "--dir", tmp, "--sock", sock,
                       "--host-bytes", "953M", "--no-mlock", "--quiet"])


def stat():
    r = subprocess.run([os.path.join(build, "loom-state"), "stat", "--sock", sock, "--json"],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"loom-state stat answered (exit {r.returncode}: {r.stderr.strip()})")
    return json.loads(r.stdout)


try:
    wait_unix_socket(sock)
    cluster = os.path.join(tmp, "cluster.json")
    with open(cluster, "w") as f:
        json.dump({"gpus_per_node": 8, "host_mem_gb": 1.0}, f)
    d = Loomd(build, "--cluster", cluster, "--state", sock, "--quiet").start()

    # Two jobs co-located: their phases alternate, and each grant hints the other one.
    ids = []
    for name in ("a", "b"):
        code, j = d.req("POST", "/v1/jobs", job_spec(name, t_roll=2.0, t_train=1.0, slo=3.0,
                                                     iterations=2, mem_rollout_gb=0.1,
                                                     mem_train_gb=0.1))
        check(code == 201, f"job {name} admitted ({code} {j})")
        ids.append(j["id"])
    for it in range(2):
        for phase in ("rollout", "train"):
            for jid in ids:
                code, lease = d.req("POST", f"/v1/jobs/{jid}/phases/{phase}/acquire?wait=20")
                check(code == 200, f"job {jid} {phase} granted")
                code, _ = d.req("POST", f"/v1/leases/{lease['lease']}/release",
                                {"status": "ok"})
                check(code == 200, f"job {jid} {phase} released")
    s = stat()
    check(s["prefetches"] > 0, f"loomd sent prefetch hints ({s['prefetches']})")

    # Accounting: fill the host tier through loom-state, then a submit that would not fit.
    sys.path.insert(0, os.path.join(source, "python"))
    os.environ["LOOM_STATE_LIB"] = os.path.join(build, "libloomstate.so")
    filler = subprocess.run(
        ["/usr/bin/python3", "-c",
         "import sys, numpy as np; sys.path.insert(0, %r); from loom import state;"
         "c = state.Client(%r); c.offload({'w': np.ones(900 << 20, np.uint8)}, job='big')"
         % (os.path.join(source, "python"), sock)], env=dict(os.environ))
    check(filler.returncode == 0, "900 MiB offloaded by another job")
    code, j = d.req("POST", "/v1/jobs", job_spec("c", mem_rollout_gb=0.2, mem_train_gb=0.2,
                                                 slo=3.0))
    check(code == 422 and "host tier" in j["error"], f"over-committing submit refused: {j}")
    code, j = d.req("POST", "/v1/jobs", job_spec("d", mem_rollout_gb=0.01, mem_train_gb=0.01,
                                                 slo=3.0))
    check(code == 201, "a submit that fits is admitted")
    # The refused submit left no trace: no job (cancelled or otherwise), ids stay dense.
    code, jobs = d.req("GET", "/v1/jobs")
    names = [x["name"] for x in (jobs["jobs"] if isinstance(jobs, dict) else jobs)]
    check("c" not in names, f"the refused job is not in the job list ({names})")
    check(j["id"] == ids[-1] + 1, f"the next job takes the next id ({j['id']} after {ids[-1]})")
    d.stop()
finally:
    st.terminate()
    st.wait()
    subprocess.run(["rm", "-rf", tmp])
