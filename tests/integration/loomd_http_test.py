"""loomd's HTTP edge against a hostile client, on a real daemon (docs/security.md).

Raw sockets speak the requests no well-behaved library would send: two Content-Length headers,
Content-Length with Transfer-Encoding: chunked (each followed on the same connection by a second
request, which must not be served), names with control characters, worker tokens spelled
another way, TLS 1.0 and 1.1 handshakes (openssl s_client), and hundreds of connections that
send one header line a second and never finish (from 127.0.0.2, another loopback address, and
from 127.0.0.1 itself)."""

import os
import re
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, job_spec  # noqa: E402

build, source = sys.argv[1], sys.argv[2]
loomd = os.path.join(build, "loomd")
tmp = tempfile.mkdtemp(prefix="loomd-http-")


def raw(port, data, timeout=5.0, src="127.0.0.1"):
    """Everything the server sends back to data until it closes (or timeout), as bytes."""
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    s.sendall(data)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except socket.timeout:
        out += b"<timeout>"
    except ConnectionResetError:
        out += b"<reset>"
    s.close()
    return out


def statuses(reply):
    return re.findall(rb"HTTP/1\.[01] (\d{3})", reply)


# -- framing (RFC 9112 6.3) -----------------------------------------------------------------------
d = Loomd(build, "--quiet")
d.start()
second = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
r = raw(d.port, b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 60\r\n"
        b"\r\n{}" + second)
check(statuses(r) == [b"400"] and b"Content-Length" in r and b"<timeout>" not in r,
      f"two Content-Lengths: one 400, the connection closed, the next request not served ({r!r})")
r = raw(d.port, b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + second)
check(statuses(r) == [b"400"] and b"Transfer-Encoding" in r and b"<timeout>" not in r,
      f"Content-Length with chunked: one 400, closed, the next request not served ({r!r})")
r = raw(d.port, b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
        + second)
check(statuses(r) == [b"501"] and b"<timeout>" not in r,
      f"a Transfer-Encoding other than chunked: 501 and closed ({r!r})")
r = raw(d.port, second + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
check(statuses(r) == [b"200", b"200"] and b"<timeout>" not in r,
      f"two well-framed requests on one connection are both served ({r!r})")
for cl, want in ((b"abc", b"400"), (b"1,1", b"400"), (b"99999999999999999999999", b"413")):
    r = raw(d.port, b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: " + cl + b"\r\n\r\n"
            + second)
    head, _, body = r.partition(b"\r\n\r\n")
    check(statuses(r) == [want] and body.startswith(b'{"error":') and b"<timeout>" not in r
          and len(body) == int(re.search(rb"Content-Length: (\d+)", head).group(1)),
          f"Content-Length {cl.decode()}: one whole {want.decode()} reply, closed, the next "
          f"request not served ({r!r})")
d.stop()

# -- control characters in names -----------------------------------------------------------------
d = Loomd(build)
d.start()
for field, bad in (("name", "job\n12:00:00.000 loomd: job 9 (x) accepted"),
                   ("name", "red\x1b[31m"), ("name", "csi\u009b2J"), ("id", "tab\there"),
                   ("id", "del\x7f")):
    st, body = d.req("POST", "/v1/jobs", dict(job_spec("ok"), **{field: bad}))
    check(st == 422 and body["field"] == field and "control character" in body["error"],
          f"a {field} with {bad[3:5]!r}...: 422 naming '{field}' ({st} {body})")
st, body = d.req("POST", "/v1/jobs", job_spec("ünïcode-名前 ok"))
check(st == 201, f"a name with non-ASCII letters is fine ({st} {body})")
log = open(d.log, "rb").read()
check(b"\x1b" not in log and b"\x9b" not in log and b"loomd: job 9 (x)" not in log,
      "nothing a client named reaches the log raw")
d.stop()

# -- worker tokens: only the spelling loomd issued ------------------------------------------------
d = Loomd(build, "--quiet")
p = subprocess.run([loomd, "token", "create", "--data-dir", d.dir, "--tenant", "t", "--role",
                    "admin"], capture_output=True, text=True)
admin = p.stdout.strip()
d.start()
st, job = d.req("POST", "/v1/jobs", job_spec("w"), headers={"Authorization": "Bearer " + admin})
check(st == 201, "a job to hold a worker token")
tok = job["worker_token"]
jid, mac = re.match(r"loom_w_(\d+)_([0-9a-f]{64})$", tok).groups()


def get_job(t):
    return d.req("GET", f"/v1/jobs/{jid}", headers={"Authorization": "Bearer " + t})[0]


check(get_job(tok) == 200, "the issued worker token works")
k = re.search("[a-f]", mac).start()
one_upper = mac[:k] + mac[k].upper() + mac[k + 1:]  # one hex letter in upper case
for other in (f"loom_w_+{jid}_{mac}", f"loom_w_0{jid}_{mac}", f"loom_w_ {jid}_{mac}",
              f"loom_w_{jid}_{mac.upper()}", f"loom_w_{jid}_{one_upper}",
              f"loom_w_{jid}_{mac}\t", f"loom_w_{jid}_{mac}0",
              f"loom_w_{int(jid) + (1 << 32)}_{mac}"):
    check(get_job(other) == 401, f"another spelling of the worker token is refused: {other[:14]}...")
d.stop()

# -- TLS: 1.2 and 1.3 only -----------------------------------------------------------------------
def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True, cwd=tmp)


sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
   "-nodes", "-keyout", "srv.key", "-out", "srv.pem", "-days", "1", "-subj", "/CN=127.0.0.1")
t = Loomd(build, "--quiet", "--tls-cert", os.path.join(tmp, "srv.pem"), "--tls-key",
          os.path.join(tmp, "srv.key"))
t.start()


def handshake(version):
    # SECLEVEL=0: this client would offer TLS 1.0/1.1 at all; the server is what is tested
    p = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{t.port}", version,
                        "-cipher", "DEFAULT:@SECLEVEL=0", "-brief"], input="",
                       capture_output=True, text=True, timeout=20)
    m = re.search(r"Protocol version: (\S+)", p.stdout + p.stderr)
    return m.group(1) if m else None


for v, want in (("-tls1", None), ("-tls1_1", None), ("-tls1_2", "TLSv1.2"),
                ("-tls1_3", "TLSv1.3")):
    got = handshake(v)
    check(got == want, f"openssl s_client {v}: {want or 'refused'} (got {got})")
t.stop()

# -- trickling connections -----------------------------------------------------------------------
d = Loomd(build, "--quiet", "--max-conns", "300", "--max-conns-per-addr", "100",
          "--request-timeout", "6")
d.start()


def trickler(src):
    s = socket.socket()
    s.bind((src, 0))
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", d.port))
    except BlockingIOError:
        pass
    return s


def trickle(socks, n):
    """n rounds, one a second, of one more header line on every socket; the closed ones."""
    closed = set()
    for i in range(n):
        for s in socks:
            if s in closed:
                continue
            try:
                s.send(b"GET /healthz HTTP/1.1\r\n" if i == 0 else b"X-Slow: %d\r\n" % i)
                if s.recv(1) == b"":
                    closed.add(s)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                closed.add(s)
        time.sleep(1)
    return closed


def healthz(timeout=3):
    try:
        return d.req("GET", "/healthz", timeout=timeout)[0]
    except (OSError, Exception) as e:  # refused, reset or timed out: not answered
        return repr(e)


flood = [trickler("127.0.0.2") for _ in range(400)]
trickle(flood, 1)
st = healthz(timeout=2)  # well before the request deadline: the per-address limit at work
check(st == 200, f"400 trickling connections from one address leave room for others ({st})")
closed = trickle(flood, 7)
check(len(closed) == len(flood),
      f"trickling one header line a second does not keep a connection past the request "
      f"deadline ({len(closed)} of {len(flood)} closed)")
for s in flood:
    s.close()
own = [trickler("127.0.0.1") for _ in range(100)]
trickle(own, 1)
t0 = time.monotonic()
st = healthz(timeout=1)
while st != 200 and time.monotonic() - t0 < 10:
    st = healthz(timeout=1)
check(st == 200 and time.monotonic() - t0 < 10,
      f"a client sharing the flood's address is answered once the deadline cut it ({st})")
for s in own:
    s.close()
check(d.stop() == 0, "loomd stops cleanly")
