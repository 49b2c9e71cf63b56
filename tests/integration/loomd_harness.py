"""Shared helpers of loomd's integration tests: start/stop a real loomd on 127.0.0.1 with a
temporary data dir, speak HTTP to it with the standard library, find the Python package."""

import atexit
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


class Loomd:
    def __init__(self, build, *args, data_dir=None):
        self.build = build
        self.args = list(args)
        self.dir = data_dir or tempfile.mkdtemp(prefix="loomd-test-")
        if data_dir is None and not os.environ.get("LOOM_KEEP_TEST_DATA"):
            # registered before any loomd, so it runs after they are reaped (atexit is LIFO)
            atexit.register(shutil.rmtree, self.dir, True)
        self.proc = None
        self.port = None
        self.log = os.path.join(self.dir, "loomd.stderr")

    def start(self, port=0):
        pf = os.path.join(self.dir, "port")
        if os.path.exists(pf):
            os.unlink(pf)
        cmd = [os.path.join(self.build, "loomd"), "--data-dir", self.dir,
               "--listen", f"127.0.0.1:{port}", "--port-file", pf] + self.args
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(self.log, "ab"))
        # However the test ends (a failed assertion, an exception), leave no loomd behind.
        atexit.register(self._reap, self.proc)
        for _ in range(500):
            if os.path.exists(pf):
                self.port = int(open(pf).read())
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"loomd exited {self.proc.returncode}: "
                                   + open(self.log).read())
            time.sleep(0.01)
        raise RuntimeError("loomd did not start")

    @staticmethod
    def _reap(proc):
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            return self.proc.wait(timeout=30)
        return self.proc.returncode if self.proc else None

    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def req(self, method, path, body=None, headers=None, raw=None, timeout=30):
        """(status, parsed JSON or text) of one request on a fresh connection."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        try:
            c.request(method, path, body=data, headers=headers or {})
        except (BrokenPipeError, ConnectionResetError):
            # The server may answer (413) and close before a large body is all sent; its
            # answer is still there to read.
            pass
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        try:
            return r.status, json.loads(text) if text else None
        except ValueError:
            return r.status, text


def weave_groups():
    """A --cluster file whose policy turns colocate_lone off: every group provisions its
    rollout nodes from its first member on, as WEAVE's groups do (for tests of the permit
    order on shared rollout nodes)."""
    d = tempfile.mkdtemp(prefix="loomd-policy-")
    atexit.register(shutil.rmtree, d, True)
    path = os.path.join(d, "weave.json")
    with open(path, "w") as f:
        f.write('{"cluster": {}, "policy": {"colocate_lone": false}}\n')
    return path


def job_spec(name, t_roll=2.0, t_train=1.0, slo=1.5, iterations=2, **extra):
    s = {"name": name, "rollout_gpus": 8, "train_gpus": 8, "t_roll_s": t_roll,
         "t_train_s": t_train, "slo": slo, "iterations": iterations}
    s.update(extra)
    return s


def python_env(build, source):
    """Environment for a child Python that imports the loom package from the source tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(source, "python")
    env["LOOM_CLIENT_LIB"] = os.path.join(build, "libloomclient.so")
    asan = sanitizer_preload(env["LOOM_CLIENT_LIB"])
    if asan:
        env["LD_PRELOAD"] = asan
        env["ASAN_OPTIONS"] = "detect_leaks=0"
    return env


def import_setup(build, source, **extra):
    """Ready this Python to import the loom package from the source tree, with LOOM_CLIENT_LIB
    set; returns python_env (plus extra) for child Pythons. A sanitized libloomclient.so needs
    the sanitizer runtimes loaded before Python starts: this re-executes the script with them."""
    env = python_env(build, source)
    env.update(extra)
    os.environ["LOOM_CLIENT_LIB"] = env["LOOM_CLIENT_LIB"]
    if "LD_PRELOAD" in env and os.environ.get("LD_PRELOAD") != env["LD_PRELOAD"]:
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    sys.path.insert(0, os.path.join(source, "python"))
    return env


def wait_unix_socket(path, tries=500):
    """Whether something accepts connections on the unix socket path within tries x 10 ms."""
    for _ in range(tries):
        if os.path.exists(path):
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(path)
                s.close()
                return True
            except OSError:
                pass
        time.sleep(0.01)
    return False


def sanitizer_preload(lib):
    """A sanitized libloomclient.so can only be loaded into Python with the runtimes
    preloaded; returns the LD_PRELOAD value or None."""
    try:
        out = subprocess.run(["ldd", lib], capture_output=True, text=True).stdout
    except OSError:
        return None
    libs = []
    for name in ("libasan.so", "libubsan.so"):
        for line in out.splitlines():
            if name in line and "=>" in line:
                libs.append(line.split("=>")[1].split()[0])
    return ":".join(libs) or None


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok   {what}")
