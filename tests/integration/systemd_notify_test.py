"""loomd and loom-state under systemd's Type=notify, without systemd: the test binds the datagram
socket $NOTIFY_SOCKET names and reads what each daemon sends. READY=1 must come once the
daemon serves (loomd: its store replayed, /healthz answering on the port it reports; loom-state:
its socket accepting), WATCHDOG=1 at half of WATCHDOG_USEC, STOPPING=1 on SIGTERM, then a clean
exit. Built without libsystemd the daemons send nothing: the test says so and is skipped."""

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, job_spec, wait_unix_socket  # noqa: E402

build, source = sys.argv[1], sys.argv[2]
if "SYSTEMD_FOUND:INTERNAL=1" not in open(os.path.join(build, "CMakeCache.txt")).read():
    print("skip: built without libsystemd (no sd_notify)")
    sys.exit(77)

tmp = tempfile.mkdtemp(prefix="loom-notify-")
sock_path = os.path.join(tmp, "notify")
nsock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
nsock.bind(sock_path)


def messages(until, timeout=30.0):
    """Datagrams received until one contains the line `until`; all of them, in order."""
    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nsock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            m = nsock.recv(4096).decode()
        except socket.timeout:
            break
        got.append(m)
        if until in m.split("\n"):
            return got
    raise AssertionError(f"no {until} within {timeout} s; got {got}")


def env(watchdog_us):
    e = dict(os.environ, NOTIFY_SOCKET=sock_path, WATCHDOG_USEC=str(watchdog_us))
    e.pop("WATCHDOG_PID", None)
    return e


# A store with one job in it, written by a loomd that is not under systemd.
d = Loomd(build, "--quiet").start()
st, job = d.req("POST", "/v1/jobs", job_spec("kept"))
check(st in (200, 201), "a job submitted to a loomd outside systemd")
check(d.stop() == 0, "that loomd stops cleanly")

# loomd under a (pretend) systemd with a 300 ms watchdog, on the same store.
log = open(os.path.join(tmp, "loomd.stderr"), "wb")
def watchdog_then_stop(p, who):
    """WATCHDOG=1 twice within WATCHDOG_USEC, then STOPPING=1 and exit 0 on SIGTERM."""
    t0 = time.monotonic()
    messages("WATCHDOG=1", timeout=5)
    messages("WATCHDOG=1", timeout=5)
    check(time.monotonic() - t0 < 5, who + "WATCHDOG=1 repeats under WATCHDOG_USEC")
    p.send_signal(signal.SIGTERM)
    messages("STOPPING=1", timeout=30)
    check(p.wait(timeout=30) == 0, who + "STOPPING=1 on SIGTERM, then exit 0")


def end(p):
    if p.poll() is None:
        p.kill()
        p.wait()


p = subprocess.Popen([os.path.join(build, "loomd"), "--data-dir", d.dir, "--listen",
                      "127.0.0.1:0", "--quiet"], env=env(300000), stdout=subprocess.DEVNULL,
                     stderr=log)
try:
    got = messages("READY=1")
    m = re.search(r"STATUS=serving on port (\d+)", got[-1])
    check(m is not None, f"READY=1 comes with the port it serves on ({got[-1]!r})")
    d.port = int(m.group(1))
    st, h = d.req("GET", "/healthz")
    check(st == 200, "at READY=1 /healthz already answers 200")
    st, jobs = d.req("GET", "/v1/jobs")
    check(st == 200 and [j["name"] for j in jobs["jobs"]] == ["kept"],
          "at READY=1 the store is replayed: the job submitted before is there")
    watchdog_then_stop(p, "")
finally:
    end(p)

# loom-state likewise.
sdir = os.path.join(tmp, "state")
ssock = os.path.join(tmp, "state.sock")
p = subprocess.Popen([os.path.join(build, "loom-state"), "--dir", sdir, "--sock", ssock,
                      "--host-bytes", "16M", "--disk-bytes", "64M", "--no-mlock", "--quiet"],
                     env=env(300000))
try:
    messages("READY=1")
    check(wait_unix_socket(ssock, tries=1), "loom-state: at READY=1 its socket accepts")
    watchdog_then_stop(p, "loom-state: ")
finally:
    end(p)
nsock.close()
subprocess.run(["rm", "-rf", tmp])
