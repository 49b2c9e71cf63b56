"""loom-worker (src/exec/loom-worker) against a scripted loomd: each case is a list of answers
the fake server gives, in order, to the worker's requests; the test checks what the worker
printed, its exit status and what it sent.

argv: the source tree.
"""
import http.server
import json
import os
import subprocess
import sys
import threading

src = sys.argv[1]
WORKER = os.path.join(src, "src", "exec", "loom-worker")
failed = []


def check(cond, what, out=""):
    print("%s %s" % ("ok  " if cond else "FAIL", what), flush=True)
    if not cond:
        print(out)
        failed.append(what)


class Fake:
    """A loomd whose answers are scripted per request kind: acquire, release, job."""

    def __init__(self, script, role="leader", location=None):
        self.script = {k: list(v) for k, v in script.items()}
        self.seen = []
        fake = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                kind = ("acquire" if "/acquire" in self.path else
                        "release" if "/release" in self.path else "job")
                fake.seen.append((self.command, self.path, body))
                queue = fake.script.get(kind) or [(404, {"error": "not scripted"})]
                st, obj = queue.pop(0) if len(queue) > 1 else queue[0]
                data = json.dumps(obj).encode() if obj is not None else b""
                self.send_response(st)
                if role == "follower":
                    self.send_header("X-Loom-Role", "follower")
                    if location:
                        self.send_header("Location", location + self.path)
                if st == 503:
                    self.send_header("Retry-After", "1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = answer

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def run(urls, grace="5"):
    env = dict(os.environ, LOOM_URL=",".join(urls), LOOM_JOB="7", LOOM_PHASE="train",
               LOOM_GRACE_S=grace)
    p = subprocess.run([sys.executable, WORKER, "0"], env=env, capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout + p.stderr


LEASE = {"lease": 11, "iteration": 1}
DONE = {"state": "finished"}
LIVE = {"state": "running"}

# a 503 on the release (a leader whose store refused the commit, being deposed) is waited out:
# the release is sent again, the phase is not run twice, the worker ends with its job
f = Fake({"acquire": [(200, LEASE), (409, {"error": "next"})],
          "release": [(503, {"error": "store"}), (503, {"error": "store"}), (200, {})],
          "job": [(200, DONE)]})
rc, out = run([f.url])
releases = [s for s in f.seen if "/release" in s[1]]
check(rc == 0 and out.count(" iteration 1 ") == 1 and len(releases) == 3,
      "a 503 on release is retried, the phase runs once (exit %d, %d releases)" %
      (rc, len(releases)), out)
f.close()

# a 503 on acquire is waited out too (no replica leads yet)
f = Fake({"acquire": [(503, {"error": "no leader"}), (200, LEASE), (409, {"error": "next"})],
          "release": [(200, {})], "job": [(200, DONE)]})
rc, out = run([f.url])
check(rc == 0 and out.count(" iteration 1 ") == 1, "a 503 on acquire is waited out (exit %d)" % rc)
f.close()

# a loomd that answers nothing but 503 for longer than LOOM_GRACE_S: exit 3
f = Fake({"acquire": [(503, {"error": "store"})]})
rc, out = run([f.url], grace="1")
check(rc == 3 and "unreachable" in out, "503s past LOOM_GRACE_S: exit 3 (exit %d)" % rc)
f.close()

# a follower's 307 names the leader: the worker goes there
lead = Fake({"acquire": [(200, LEASE), (409, {"error": "next"})], "release": [(200, {})],
             "job": [(200, DONE)]})
fol = Fake({"acquire": [(307, None)], "release": [(307, None)], "job": [(307, None)]},
           role="follower", location=lead.url)
rc, out = run([fol.url, lead.url])
check(rc == 0 and out.count(" iteration 1 ") == 1 and any("/acquire" in s[1] for s in lead.seen),
      "a follower's redirect leads to the leader (exit %d)" % rc)
lead.close()
fol.close()

# a release that came after the lease expired (410): said, and the phase is granted again
f = Fake({"acquire": [(200, LEASE), (200, {"lease": 12, "iteration": 1}), (409, {"error": "n"})],
          "release": [(410, {"error": "expired"}), (200, {})], "job": [(200, DONE)]})
rc, out = run([f.url])
check(rc == 0 and "release too late: lease 11 expired" in out and out.count(" iteration 1 ") == 2,
      "a 410 on release is said and the phase runs again (exit %d)" % rc)
f.close()

# a refusal (403) ends the worker with status 1
f = Fake({"acquire": [(403, {"error": "forbidden"})]})
rc, out = run([f.url])
check(rc == 1 and "refused 403" in out, "a 403 ends the worker with status 1 (exit %d)" % rc)
f.close()

sys.exit(1 if failed else 0)
