"""A publisher endpoint that accepts every connection and closes it at once: Puller.pull on an
endpoint file keeps retrying until its timeout, and must pause between attempts (exponential
back-off) instead of spinning. Usage: sync_backoff_test.py BUILD_DIR SOURCE_DIR"""
import os
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import import_setup  # noqa: E402

build, source = sys.argv[1], sys.argv[2]
import_setup(build, source, LOOM_SYNC_LIB=os.path.join(build, "libloomsync.so"))
os.environ["LOOM_SYNC_LIB"] = os.path.join(build, "libloomsync.so")
import numpy as np  # noqa: E402
from loom.weights import Puller, SyncError  # noqa: E402

srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(128)
accepted = 0
stop = False


def rude():
    global accepted
    srv.settimeout(0.1)
    while not stop:
        try:
            c, _ = srv.accept()
        except socket.timeout:
            continue
        accepted += 1
        c.close()


t = threading.Thread(target=rude)
t.start()
with tempfile.TemporaryDirectory() as d:
    ep = os.path.join(d, "endpoint")
    with open(ep, "w") as f:
        f.write(f"127.0.0.1:{srv.getsockname()[1]}\n")
    p = Puller(ep, [1000])
    flat = np.zeros(1000, dtype=np.uint16)
    t0 = time.monotonic()
    try:
        p.pull(flat, 1, timeout_s=2.0)
        failed = False
    except SyncError:
        failed = True
    took = time.monotonic() - t0
stop = True
t.join()
srv.close()
print(f"pull failed: {failed} after {took:.2f} s, {accepted} connections accepted")
ok = failed and accepted >= 2 and accepted <= 12 and took >= 1.5 and not flat.any()
if not ok:
    print("FAIL: the puller must keep trying, pausing between attempts (2..12 connections in 2 s)")
    sys.exit(1)
print("PASS sync_backoff")
