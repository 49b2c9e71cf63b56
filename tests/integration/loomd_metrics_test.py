"""loomd's /metrics against a real daemon: the page passes `promtool check metrics` (where
promtool is installed; scripts/deps.sh installs it) and the exposition format's rules checked
here (HELP and TYPE per family, label names, no label `job` or `instance`, no duplicate series,
counters ending in _total, histograms cumulative); per-job series with id and name; lease
outcomes; the permit protocol's 409s counted apart from other 4xx; HEAD /metrics; and the
scrape config in docs/operations.md passes `promtool check config`."""

import http.client
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, job_spec, weave_groups  # noqa: E402

build, source = sys.argv[1], sys.argv[2]
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*$")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse_labels(s):
    """[(name, value)] of the text between { and }, or raise ValueError."""
    out, i = [], 0
    while i < len(s):
        eq = s.index("=", i)
        name = s[i:eq]
        if s[eq + 1] != '"':
            raise ValueError(f"label {name}: value not quoted")
        j, val = eq + 2, []
        while s[j] != '"':
            if s[j] == "\\":
                esc = s[j + 1]
                if esc not in '\\"n':
                    raise ValueError(f"label {name}: bad escape \\{esc}")
                val.append("\n" if esc == "n" else esc)
                j += 2
            else:
                val.append(s[j])
                j += 1
        out.append((name, "".join(val)))
        i = j + 1
        if i < len(s):
            if s[i] != ",":
                raise ValueError(f"label {name}: expected ',' after the value")
            i += 1
    return out


def lint(text):
    """(problems, {(name, labels tuple): value}) of a text exposition (format 0.0.4)."""
    problems, series = [], {}
    helps, types, done, current = set(), {}, set(), None
    if not text.endswith("\n"):
        problems.append("the page does not end in a newline")
    for n, line in enumerate(text.split("\n")[:-1], 1):
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                fam = parts[2]
                if not NAME.match(fam):
                    problems.append(f"line {n}: bad metric name {fam}")
                if fam in done or (fam in types and parts[1] == "TYPE") or \
                        (fam in helps and parts[1] == "HELP"):
                    problems.append(f"line {n}: {parts[1]} for {fam} again")
                if parts[1] == "HELP":
                    if len(parts) < 4 or not parts[3].strip():
                        problems.append(f"line {n}: empty HELP for {fam}")
                    helps.add(fam)
                else:
                    t = parts[3] if len(parts) > 3 else ""
                    if t not in TYPES:
                        problems.append(f"line {n}: unknown type {t!r}")
                    types[fam] = t
                    if t == "counter" and not fam.endswith("_total"):
                        problems.append(f"line {n}: counter {fam} does not end in _total")
                if current and current != fam:
                    done.add(current)
                current = fam
            continue
        if not line:
            problems.append(f"line {n}: empty line")
            continue
        m = re.match(r"([^{ ]+)(?:\{(.*)\})? (\S+)(?: (-?\d+))?$", line)
        if not m:
            problems.append(f"line {n}: not NAME{{LABELS}} VALUE: {line}")
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        fam = name
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[: -len(suffix)]
            if name.endswith(suffix) and types.get(base) in ("histogram", "summary"):
                fam = base
        if fam not in types or fam not in helps:
            problems.append(f"line {n}: {name} has no TYPE and HELP before it")
        if fam in done or (current and fam != current):
            problems.append(f"line {n}: {name} outside its family's block")
        try:
            ls = parse_labels(labels)
        except (ValueError, IndexError) as e:
            problems.append(f"line {n}: {e}")
            continue
        names = [k for k, _ in ls]
        for k in names:
            if not LABEL.match(k) or k.startswith("__"):
                problems.append(f"line {n}: bad label name {k}")
            if k in ("job", "instance"):
                problems.append(f"line {n}: label {k} (Prometheus sets it on every series)")
        if len(set(names)) != len(names):
            problems.append(f"line {n}: a label twice")
        try:
            v = float(value)
        except ValueError:
            problems.append(f"line {n}: value {value} is not a number")
            continue
        key = (name, tuple(sorted(ls)))
        if key in series:
            problems.append(f"line {n}: duplicate series {name}{{{labels}}}")
        series[key] = v
    # histograms: buckets cumulative, +Inf equal to _count
    for fam, t in types.items():
        if t != "histogram":
            continue
        groups = {}
        for (name, ls), v in series.items():
            if name == fam + "_bucket":
                rest = tuple(x for x in ls if x[0] != "le")
                le = dict(ls).get("le")
                if le is None:
                    problems.append(f"{fam}_bucket without le")
                    continue
                groups.setdefault(rest, []).append((float(le), v))
        for rest, bs in groups.items():
            bs.sort()
            if bs[-1][0] != math.inf:
                problems.append(f"{fam}{rest}: no +Inf bucket")
            if any(hi[1] < lo[1] for lo, hi in zip(bs, bs[1:])):
                problems.append(f"{fam}{rest}: buckets not cumulative")
            if series.get((fam + "_count", rest)) != bs[-1][1]:
                problems.append(f"{fam}{rest}: _count is not the +Inf bucket")
    return problems, series


def get_metrics(d):
    st, text = d.req("GET", "/metrics")
    check(st == 200 and isinstance(text, str), "GET /metrics: 200 with text")
    return text


def value(series, name, **labels):
    for (n, ls), v in series.items():
        if n == name and all(dict(ls).get(k) == x for k, x in labels.items()):
            return v
    return None


promtool = shutil.which("promtool")
print(f"promtool: {promtool or 'not installed (the rules are checked here only)'}")


def check_page(text, what):
    problems, series = lint(text)
    check(not problems, f"{what}: the exposition format's rules hold"
          + "".join("\n  " + x for x in problems))
    if promtool:
        p = subprocess.run([promtool, "check", "metrics"], input=text, text=True,
                           capture_output=True)
        check(p.returncode == 0,
              f"{what}: promtool check metrics passes" + (p.stdout + p.stderr if p.returncode else ""))
    return series


d = Loomd(build, "--cluster", weave_groups(), "--lease-timeout", "30", "--quiet").start()

# -- a page with no jobs ----------------------------------------------------------------------------
s0 = check_page(get_metrics(d), "no jobs")
version = re.search(r"project\(loom VERSION (\S+)",
                    open(os.path.join(source, "CMakeLists.txt")).read()).group(1)
check(value(s0, "loom_build_info", version=version) == 1,
      f"loom_build_info{{version=\"{version}\"}} 1")

# -- HEAD -------------------------------------------------------------------------------------------
c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
c.request("HEAD", "/metrics")
r = c.getresponse()
body = r.read()
check(r.status == 200 and body == b"" and
      r.getheader("Content-Type", "").startswith("text/plain"),
      f"HEAD /metrics: 200, text/plain, no body (got {r.status})")
c.close()
st, e = d.req("POST", "/metrics")
check(st == 405 and "HEAD" in e["error"], "POST /metrics: 405 naming GET, HEAD")

# -- jobs, leases, 409s ------------------------------------------------------------------------------
odd = 'trainer "a\\b"'  # a quote and a backslash, escaped in the label
st, a = d.req("POST", "/v1/jobs", job_spec(odd, 2, 1, 1.5, 5))
check(st == 201, "job A submitted")
st, b = d.req("POST", "/v1/jobs", job_spec("plain", 1, 2, 1.5, 5))
check(st == 201, "job B submitted")
A, B = a["id"], b["id"]

m = lint(get_metrics(d))[1]
base409 = value(m, "loom_http_replies_total", code="409")
base4xx = value(m, "loom_http_replies_total", code="4xx")
check(base409 == 0, "no 409 yet")

t1 = time.monotonic()
st, l1 = d.req("POST", f"/v1/jobs/{A}/phases/rollout/acquire?wait=10")
t1 = (t1 + time.monotonic()) / 2
check(st == 200, "A's rollout granted")
st, _ = d.req("POST", f"/v1/leases/{l1['lease']}/release")
check(st == 200, "A's rollout released")
st, _ = d.req("POST", f"/v1/jobs/{A}/phases/rollout/acquire?wait=0")
check(st == 409, "A acquiring rollout when it runs train next: 409")
st, _ = d.req("GET", "/v1/jobs/999999")
check(st == 404, "an unknown job: 404")
st, l2 = d.req("POST", f"/v1/jobs/{A}/phases/train/acquire?wait=10")
check(st == 200, "A's train granted")
st, _ = d.req("POST", f"/v1/leases/{l2['lease']}/release")
check(st == 200, "A's train released: one iteration")

m = check_page(get_metrics(d), "two live jobs")
check(value(m, "loom_http_replies_total", code="409") == base409 + 1,
      "the 409 is counted under code=\"409\"")
check(value(m, "loom_http_replies_total", code="4xx") == base4xx + 1,
      "code=\"4xx\" counted the 404 and not the 409")
check(value(m, "loom_job_iterations", job_id=str(A), job_name=odd) == 1,
      "loom_job_iterations of A (its name escaped and read back): 1")
check(value(m, "loom_job_iterations", job_id=str(B), job_name="plain") == 0,
      "loom_job_iterations of B: 0")
for j in (A, B):
    h = value(m, "loom_job_planned_slo_headroom_ratio", job_id=str(j))
    check(h is not None and 0 <= h < 1, f"job {j}: planned SLO headroom in [0, 1): {h}")
    check(value(m, "loom_job_slo_headroom_ratio", job_id=str(j)) is None,
          f"job {j}: no measured SLO headroom before its second rollout")
    cost = value(m, "loom_job_cost_dollars", job_id=str(j))
    check(cost is not None and cost > 0, f"job {j}: cost so far > 0: {cost}")

st, l3 = d.req("POST", f"/v1/jobs/{B}/phases/rollout/acquire?wait=10")
check(st == 200, "B's rollout granted")
st, _ = d.req("DELETE", f"/v1/jobs/{B}")
check(st == 200, "B cancelled while it holds a lease")
t4 = time.monotonic()
st, l4 = d.req("POST", f"/v1/jobs/{A}/phases/rollout/acquire?wait=10")
t4 = (t4 + time.monotonic()) / 2
check(st == 200, "A's second rollout granted")
st, _ = d.req("POST", f"/v1/leases/{l4['lease']}/release", {"status": "failed"})
check(st == 200, "A's second rollout released as failed (A restarts)")

m = check_page(get_metrics(d), "after a cancel and a failure")
want = {"granted": 4, "released": 2, "failed": 1, "revoked": 1, "expired": 0,
        "permit_expired": 0}
got = {k: value(m, "loom_leases_total", event=k) for k in want}
check(got == want, f"loom_leases_total by outcome: {got}")
check(value(m, "loom_job_iterations", job_id=str(B)) is None,
      "an ended job has no per-job series")
check(value(m, "loom_job_iterations", job_id=str(A)) == 1, "A, restarted, still counts 1")
h = value(m, "loom_job_slo_headroom_ratio", job_id=str(A))
want_h = 1 - (t4 - t1) / (1.5 * 3.0)  # slo x (t_roll + t_train)
check(h is not None and abs(h - want_h) < 0.1,
      f"A's SLO headroom from its two rollout grants: {h} (about {want_h:.3f})")
check(d.stop() == 0, "loomd stops")

# -- a job slower than its SLO: headroom below 0 ------------------------------------------------------
d = Loomd(build, "--lease-timeout", "30", "--quiet").start()
st, c = d.req("POST", "/v1/jobs", job_spec("quick", 0.1, 0.1, 1.0, 10))
check(st == 201, "job C (budget 0.2 s an iteration) submitted")
for it in range(3):
    for ph in ("rollout", "train"):
        st, lc = d.req("POST", f"/v1/jobs/{c['id']}/phases/{ph}/acquire?wait=10")
        check(st == 200, f"C's {ph} {it + 1} granted")
        time.sleep(0.25)
        st, _ = d.req("POST", f"/v1/leases/{lc['lease']}/release")
        check(st == 200, f"C's {ph} {it + 1} released")
m = check_page(get_metrics(d), "a slow job")
h = value(m, "loom_job_slo_headroom_ratio", job_id=str(c["id"]), job_name="quick")
check(h is not None and h < -1, f"C, 0.5 s an iteration against 0.2 s: headroom below 0 ({h})")
check(value(m, "loom_job_iterations", job_id=str(c["id"])) == 3, "C: 3 iterations")
check(d.stop() == 0, "loomd stops")

# -- the scrape config in docs/operations.md ---------------------------------------------------------
if promtool:
    doc = open(os.path.join(source, "docs", "operations.md")).read()
    blocks = [x for x in re.findall(r"```yaml\n(.*?)```", doc, re.S) if "scrape_configs" in x]
    check(len(blocks) == 1, "docs/operations.md has one scrape config")
    tmp = tempfile.mkdtemp(prefix="loom-scrape-")
    try:
        cfg = blocks[0]
        for f in re.findall(r"credentials_file: (\S+)", cfg):
            local = os.path.join(tmp, os.path.basename(f))
            open(local, "w").write("token\n")
            cfg = cfg.replace(f, local)
        for f in re.findall(r"ca_file: (\S+)", cfg):
            cfg = cfg.replace(f, os.path.join(tmp, "ca.pem"))
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=loom-test",
                            "-keyout", os.path.join(tmp, "key.pem"), "-out",
                            os.path.join(tmp, "ca.pem"), "-days", "1"],
                           check=True, capture_output=True)
        path = os.path.join(tmp, "prometheus.yml")
        open(path, "w").write(cfg)
        p = subprocess.run([promtool, "check", "config", path], capture_output=True, text=True)
        check(re.search(r"authorization:\s*\n\s*type: Bearer", blocks[0]) is not None and
              "credentials_file" in blocks[0], "the scrape config carries a bearer token")
        check(p.returncode == 0,
              "promtool check config passes on it" + (p.stdout + p.stderr if p.returncode else ""))
    finally:
        shutil.rmtree(tmp, True)
