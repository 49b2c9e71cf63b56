"""What the live Slurm tests share (slurm_exec_test.py, slurm_boot_test.py): free ports, skipping
where Slurm cannot run, the local cluster (scripts/slurm-cluster.sh) up and torn down however the
test ends, loomd's node map, and Slurm's own view of nodes and steps."""

import atexit
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from loomd_harness import check


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(0)


def free_base(lo, hi, salt=1):
    """A base port in [lo, hi) with the next 8 ports free (slurmctld + 4 slurmd + loomd +
    spare); salt keeps tests run side by side on different draws. Keep [lo, hi) below the
    kernel's ephemeral ports (32768-60999 here): a client socket that takes a node's port while
    it is powered down keeps its slurmd from starting, and Slurm gives up on the node."""
    rng = random.Random(os.getpid() * salt)
    for _ in range(200):
        base = rng.randrange(lo, hi, 10)
        socks = []
        try:
            for p in range(base, base + 8):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            pass
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free ports")


def cluster_up(script, prefix, base, up_args=(), down_timeout=60, cancel_first=False):
    """Skip unless Slurm can run here; then a local cluster in a new temporary directory
    (prefix), SLURM_CONF pointing at it, torn down at exit (scancel -u root first if
    cancel_first; the directory kept if LOOM_KEEP_TEST_DATA is set). Returns (dir, cluster dir).
    The teardown is registered before anything a test starts later, so it runs after their own
    (atexit is LIFO)."""
    for tool in ("slurmctld", "slurmd", "munged", "sbatch", "srun"):
        if not shutil.which(tool):
            skip(f"{tool} is not installed (scripts/deps.sh installs slurm-wlm and munge)")
    if os.geteuid() != 0:
        skip("the local Slurm cluster runs its daemons as root")
    d = tempfile.mkdtemp(prefix=prefix)
    cdir = os.path.join(d, "cluster")
    os.environ["SLURM_CONF"] = os.path.join(cdir, "slurm.conf")

    def teardown():
        if cancel_first:
            subprocess.run(["scancel", "-u", "root"], capture_output=True, timeout=10)
        subprocess.run(["bash", script, "down", cdir], capture_output=True, timeout=down_timeout)
        if not os.environ.get("LOOM_KEEP_TEST_DATA"):
            shutil.rmtree(d, True)

    atexit.register(teardown)
    up = subprocess.run(["bash", script, "up", cdir, str(base), *up_args], capture_output=True,
                        text=True, timeout=60)
    if up.returncode != 0:
        skip("Slurm could not start here: " + up.stderr.strip())
    return d, cdir


def write_nodes(d, roll, train):
    """loomd's --exec-nodes file for the cluster's rollout and train partitions."""
    path = os.path.join(d, "nodes.json")
    with open(path, "w") as f:
        json.dump({"rollout": {"partition": "rollout", "nodes": roll},
                   "train": {"partition": "train", "nodes": train}}, f)
    return path


def out(*cmd):
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=10).stdout


def steps():
    """{step name: [(step id, node)]} of loom's workers, as squeue lists them."""
    r = {}
    for line in out("squeue", "-h", "-a", "-s", "-o", "%i|%j|%N").splitlines():
        sid, name, node = line.split("|")
        if name.startswith("loom-j"):
            r.setdefault(name, []).append((sid, node))
    return r


def node_states():
    return dict(line.split("|") for line in out("sinfo", "-h", "-N", "-o", "%N|%T").splitlines())


def wait(cond, what, timeout=40, every=0.2, on_tick=None):
    end = time.time() + timeout
    while time.time() < end:
        if on_tick:
            on_tick()
        v = cond()
        if v:
            return v
        time.sleep(every)
    check(False, what)
