"""Restart a worker process when it dies: the launcher side of loom's resume path.

    python -m loom.supervise [--max-restarts N] [--delay S] [--pid-file F] -- CMD [ARG...]

Runs CMD; when it exits with a non-zero status or is killed by a signal (kill -9, the OOM
killer), starts it again after --delay seconds, at most --max-restarts times (default 10).
An exit status of 0 ends supervision. SIGTERM and SIGINT are passed on to the worker and end
supervision. --pid-file holds the pid of the worker running now (for operators and tests).

The restarted worker resumes by attaching to its job (``loom.Job.attach``), which tells loomd
the previous worker is gone; this is the part systemd's ``Restart=on-failure`` or a Kubernetes
pod's restart policy plays in a real deployment, for machines that have neither.
Exit status: the worker's last status (128 + signal number when it was killed), 2 for bad usage.
"""

import argparse
import os
import signal
import subprocess
import sys
import time


def _status(rc):
    return 128 - rc if rc < 0 else rc


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m loom.supervise",
                                description="Restart a worker process when it dies.")
    p.add_argument("--max-restarts", type=int, default=10,
                   help="restarts before giving up (default 10)")
    p.add_argument("--delay", type=float, default=1.0,
                   help="seconds between a death and the restart (default 1)")
    p.add_argument("--pid-file", help="write the running worker's pid here")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARG...]")
    a = p.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        p.print_usage(sys.stderr)
        print("python -m loom.supervise: a command to run is required", file=sys.stderr)
        return 2
    if a.max_restarts < 0 or not a.delay >= 0:
        print("python -m loom.supervise: --max-restarts and --delay must be >= 0",
              file=sys.stderr)
        return 2
    child = None
    stopping = False

    def forward(sig, _frame):
        nonlocal stopping
        stopping = True
        if child and child.poll() is None:
            child.send_signal(sig)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    restarts = 0
    while True:
        child = subprocess.Popen(cmd)
        if a.pid_file:
            tmp = a.pid_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"{child.pid}\n")
            os.replace(tmp, a.pid_file)
        print(f"supervise: worker pid {child.pid} started", file=sys.stderr, flush=True)
        rc = child.wait()
        if rc == 0 or stopping:
            return _status(rc)
        if restarts >= a.max_restarts:
            print(f"supervise: worker exited with {_status(rc)}; {restarts} restarts used, "
                  "giving up", file=sys.stderr, flush=True)
            return _status(rc)
        restarts += 1
        print(f"supervise: worker exited with {_status(rc)}; restart {restarts} of "
              f"{a.max_restarts} in {a.delay:g} s", file=sys.stderr, flush=True)
        time.sleep(a.delay)


if __name__ == "__main__":
    sys.exit(main())
