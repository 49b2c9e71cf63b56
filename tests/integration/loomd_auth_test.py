"""loomd's authentication against a real daemon (docs/security.md).

Tokens are created with `loomd token create` before loomd starts (so it serves with tokens)
and while it runs (revocation and expiry take effect at the next request). The expected answer
of every (route, principal) pair is written out below from the role table, independently of
the server's code: 401 without a valid token, 403 for a role that may never make the request,
404 for another tenant's (or another job's) job or lease, and anything else for an allowed
request. Certificates for the TLS part are generated here with openssl (test-only keys in a
temporary directory)."""

import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, import_setup, job_spec  # noqa: E402

build, source = sys.argv[1], sys.argv[2]
import_setup(build, source)
import loom  # noqa: E402

loomd = os.path.join(build, "loomd")
tmp = tempfile.mkdtemp(prefix="loomd-auth-")


def token(data_dir, tenant, role="tenant", *extra):
    p = subprocess.run([loomd, "token", "create", "--data-dir", data_dir, "--tenant", tenant,
                        "--role", role] + list(extra), capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    tok = p.stdout.strip()
    tid = int(p.stderr.split()[1].rstrip(":"))
    return tok, tid


d = Loomd(build, "--quiet", "--lease-timeout", "30")
admin, _ = token(d.dir, "ops", "admin")
ta, _ = token(d.dir, "team-a")
tb, _ = token(d.dir, "team-b")
revoked, revoked_id = token(d.dir, "team-a")
d.start()


def req(method, path, tok=None, body=None, headers=None):
    h = dict(headers or {})
    if tok:
        h["Authorization"] = "Bearer " + tok
    return d.req(method, path, body=body, headers=h)


# -- tokens from the CLI, and what a submit hands back ----------------------------------------------
st, _ = req("GET", "/v1/jobs", revoked)
check(st == 200, "a fresh tenant token works")
st, ja = req("POST", "/v1/jobs", ta, job_spec("A", iterations=5), {"Idempotency-Key": "k1"})
check(st == 201 and ja["tenant"] == "team-a" and ja["worker_token"].startswith(f"loom_w_{ja['id']}_")
      and len(ja["sync_key"]) == 64, "a tenant's submit: its tenant, a worker token and a sync key")
st, jb = req("POST", "/v1/jobs", tb, job_spec("B", iterations=5), {"Idempotency-Key": "k1"})
check(st == 201 and jb["id"] != ja["id"] and jb["tenant"] == "team-b",
      "the same Idempotency-Key from another tenant is another job (keys are per tenant)")
A, B = ja["id"], jb["id"]
wa, wb = ja["worker_token"], jb["worker_token"]
check(wa != wb and ja["sync_key"] != jb["sync_key"], "each job has its own worker token and key")
st, again = req("POST", "/v1/jobs", ta, job_spec("A", iterations=5), {"Idempotency-Key": "k1"})
check(st == 200 and again["id"] == A and again["worker_token"] == wa,
      "a retried submit answers the same job and the same worker token")
st, lease = req("POST", f"/v1/jobs/{A}/phases/rollout/acquire?wait=5", wa)
check(st == 200, "the worker token acquires its job's rollout")
L = lease["lease"]
check(isinstance(L, int), f"acquire names the lease ({lease})")

p = subprocess.run([loomd, "token", "revoke", "--data-dir", d.dir, str(revoked_id)],
                   capture_output=True, text=True)
check(p.returncode == 0, "loomd token revoke")
expired, _ = token(d.dir, "team-a", "tenant", "--ttl", "1")
time.sleep(2.1)
lst = subprocess.run([loomd, "token", "list", "--data-dir", d.dir], capture_output=True, text=True)
check(lst.returncode == 0 and "revoked" in lst.stdout and "expired" in lst.stdout
      and admin not in lst.stdout and ta not in lst.stdout,
      "loomd token list: states, never the token text")

forged = "loom_w_%d_%s" % (A, "00" * 32)
moved = "loom_w_%d_%s" % (B, wa.split("_")[3])  # A's MAC presented for job B

# -- every route x every principal ---------------------------------------------------------------
OK = "ok"
principals = {
    "none": None, "garbage": "loom_t_" + "ab" * 32, "forged-worker": forged,
    "worker-mac-on-other-job": moved, "revoked": revoked, "expired": expired,
    "admin": admin, "tenant-a": ta, "tenant-b": tb, "worker-a": wa, "worker-b": wb,
}
routes = [  # (name, method, path, body); all on job A (team-a's) and its lease
    ("healthz", "GET", "/healthz", None),
    ("metrics", "GET", "/metrics", None),
    ("list", "GET", "/v1/jobs", None),
    ("submit", "POST", "/v1/jobs", job_spec("X", iterations=1)),
    ("groups", "GET", "/v1/groups", None),
    ("cluster", "GET", "/v1/cluster", None),
    ("get", "GET", f"/v1/jobs/{A}", None),
    ("acquire", "POST", f"/v1/jobs/{A}/phases/rollout/acquire?wait=0", ""),
    ("attach", "POST", f"/v1/jobs/{A}/attach", {}),
    ("heartbeat", "POST", f"/v1/leases/{L}/heartbeat", ""),
    ("progress", "POST", f"/v1/leases/{L}/progress", {"done": 1, "total": 10}),
    ("release", "POST", f"/v1/leases/{L}/release", {"status": "ok"}),
    ("cancel", "DELETE", f"/v1/jobs/{A}", None),
]
JOB_ROUTES = {"get", "acquire", "attach", "heartbeat", "progress", "release", "cancel"}


def expected(route, who):
    if route == "healthz":
        return OK
    if who in ("none", "garbage", "forged-worker", "worker-mac-on-other-job", "revoked",
               "expired"):
        return 401
    if who == "admin":
        return OK
    if who.startswith("tenant"):
        if route in ("metrics", "groups"):
            return 403
        if route in JOB_ROUTES and who != "tenant-a":
            return 404
        return OK
    # workers: their own job's get/acquire/attach/lease calls only
    if route in ("metrics", "list", "submit", "groups", "cluster", "cancel"):
        return 403
    return OK if who == "worker-a" else 404


def job_a():
    _, j = req("GET", f"/v1/jobs/{A}", admin)
    return json.dumps({k: j[k] for k in ("state", "lease", "iterations_done")}, sort_keys=True)


# Everything denied first (the allowed release and cancel change job A), then the allowed.
n = 0
for allowed_pass in (False, True):
    for name, method, path, body in routes:
        for who, tok in principals.items():
            want = expected(name, who)
            if (want == OK) != allowed_pass:
                continue
            if allowed_pass and name in ("release", "cancel") and who not in ("worker-a",
                                                                               "tenant-a"):
                continue  # done once below, by the job's own principals
            before = job_a()
            st, out = req(method, path, tok, body)
            got = OK if st not in (401, 403, 404) else st
            check(got == want, f"{method} {name} as {who}: {st} (want {want})")
            if want != OK:
                check(job_a() == before, f"  ... and job {A} is unchanged")
                if want == 401:
                    check(isinstance(out, dict) and out.get("field") == "Authorization",
                          "  ... 401 names the Authorization header")
            n += 1
print(f"{n} route x principal checks")

st, out = req("GET", "/v1/jobs", tb)
check(st == 200 and [j["id"] for j in out["jobs"] if j["tenant"] != "team-b"] == [],
      "a tenant's job list has only its own jobs")
st, nf = req("GET", f"/v1/jobs/{A}", tb)
st2, nf2 = req("GET", "/v1/jobs/999", tb)
check(nf["error"].replace(str(A), "N") == nf2["error"].replace("999", "N"),
      "another tenant's job and a job that does not exist answer alike")
st, out = req("DELETE", f"/v1/jobs/{B}", admin)
check(st == 200 and out["state"] == "cancelled", "an admin token cancels any tenant's job")
st, out = req("GET", "/metrics", wa)
check(st == 403, "a worker token does not read /metrics")
d.stop()

# -- refusals at start ----------------------------------------------------------------------------
def start_fails(args, what, needle):
    p = subprocess.run([loomd, "--quiet"] + args, capture_output=True, text=True, timeout=20)
    check(p.returncode == 1 and needle in p.stderr, f"{what} ({p.stderr.strip()})")


start_fails(["--data-dir", os.path.join(tmp, "r1"), "--listen", "0.0.0.0:0",
             "--insecure-loopback"], "--insecure-loopback refused off loopback", "loopback")
start_fails(["--data-dir", os.path.join(tmp, "r2"), "--listen", "0.0.0.0:0"],
            "a non-loopback address without TLS is refused", "TLS")
p = subprocess.run([loomd, "--data-dir", os.path.join(tmp, "r3"), "--require-auth",
                    "--insecure-loopback"], capture_output=True, text=True)
check(p.returncode == 2, "--require-auth with --insecure-loopback is bad usage")

# -- TLS --------------------------------------------------------------------------------------------
def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True, cwd=tmp)


ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
for ca in ("ca", "other-ca"):
    sh("openssl", "req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "1",
       "-subj", f"/CN={ca}")
sh("openssl", "req", *ec, "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1")
with open(os.path.join(tmp, "san.ext"), "w") as f:
    f.write("subjectAltName=IP:127.0.0.1\n")
sh("openssl", "x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
   "-CAcreateserial", "-out", "srv.pem", "-days", "1", "-extfile", "san.ext")
ca, other = os.path.join(tmp, "ca.pem"), os.path.join(tmp, "other-ca.pem")

start_fails(["--data-dir", os.path.join(tmp, "r4"), "--listen", "0.0.0.0:0", "--tls-cert",
             os.path.join(tmp, "srv.pem"), "--tls-key", os.path.join(tmp, "srv.key")],
            "off loopback with no token at all is refused", "no tokens")

t = Loomd(build, "--quiet", "--tls-cert", os.path.join(tmp, "srv.pem"), "--tls-key",
          os.path.join(tmp, "srv.key"))
tadmin, _ = token(t.dir, "ops", "admin")
t.start()


def https(cafile, tok):
    ctx = ssl.create_default_context(cafile=cafile)
    c = http.client.HTTPSConnection("127.0.0.1", t.port, context=ctx, timeout=10)
    c.request("GET", "/v1/jobs", headers={"Authorization": "Bearer " + tok})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


check(https(ca, tadmin) == 200, "HTTPS: the right CA verifies loomd and the token is accepted")
try:
    https(other, tadmin)
    check(False, "HTTPS with the wrong CA must fail")
except ssl.SSLCertVerificationError:
    check(True, "HTTPS with the wrong CA: the handshake fails verification")
try:
    c = http.client.HTTPConnection("127.0.0.1", t.port, timeout=5)
    c.request("GET", "/healthz")
    c.getresponse()
    check(False, "plain HTTP to the HTTPS port must fail")
except (http.client.HTTPException, ConnectionError, socket.timeout, OSError):
    check(True, "plain HTTP to the HTTPS port gets no answer")

# the C client (libcurl) through the Python package: token + CA file
url = f"https://127.0.0.1:{t.port}"
job = loom.Job.submit(url, job_spec("T", iterations=1), token=tadmin, ca_file=ca, retry_for_s=2)
check(job.id >= 1 and job.worker_token, "C client over HTTPS: submit with a token and a CA file")
w = loom.Job.attach(url, job.id, token=job.worker_token, ca_file=ca, retry_for_s=2)
check(w.next_phase == "rollout", "C client: a worker attaches with its worker token")
for bad, what in ((dict(token=tadmin, ca_file=other), "the wrong CA"),
                  (dict(token="loom_t_" + "cd" * 32, ca_file=ca), "an unknown token")):
    try:
        loom.Job.attach(url, job.id, retry_for_s=1, **bad)
        check(False, f"C client with {what} must fail")
    except loom.LoomError as e:
        check(True, f"C client with {what} fails: {e}")
t.stop()
subprocess.run(["rm", "-rf", tmp])
print("auth: all checks passed")
