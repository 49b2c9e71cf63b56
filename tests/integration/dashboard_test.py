"""The dashboard in a real browser (docs/dashboard.md).

A loomd with tokens runs three small jobs of two tenants: workers (threads here, speaking the
HTTP API with their worker tokens) run their phases for real, and one of them releases a phase
as failed once, so loomd restarts it. Headless Chromium then loads /dashboard and its DOM is
read back after the page has polled: with the admin token (given as #token=) it must show the
group and its members with their rates, Gantt bars of every job on the nodes the leases name,
the jobs table and the restart in the event list; with a tenant token only that tenant's jobs;
with no token, the token form and no data. A screenshot is saved as BUILD/dashboard.png.

Expected values come from the API itself (GET /v1/groups, /v1/jobs) and from what the workers
did, not from the page's code. Exits 77 (skipped) when no Chromium is installed."""

import html.parser
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, job_spec  # noqa: E402

build, source = sys.argv[1], sys.argv[2]
browser = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(b)), None)
if not browser:
    print("SKIP: no chromium in PATH (scripts/deps.sh installs the Debian package 'chromium')")
    sys.exit(77)

loomd = os.path.join(build, "loomd")


def token(data_dir, tenant, role="tenant"):
    p = subprocess.run([loomd, "token", "create", "--data-dir", data_dir, "--tenant", tenant,
                        "--role", role], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


d = Loomd(build, "--quiet", "--lease-timeout", "10")
admin = token(d.dir, "ops", "admin")
ta = token(d.dir, "team-a")
tb = token(d.dir, "team-b")
d.start()


def req(method, path, tok=None, body=None):
    return d.req(method, path, body=body,
                 headers={"Authorization": "Bearer " + tok} if tok else {})


# -- the page is public, its data is not ------------------------------------------------------
st, page = d.req("GET", "/dashboard")
check(st == 200 and "dashboard.js" in page, "GET /dashboard without a token: the page")
st, js = d.req("GET", "/dashboard/dashboard.js")
check(st == 200 and "/v1/timeline" in js, "its script is served from the binary")
st, _ = d.req("GET", "/dashboard/nope.js")
check(st == 404, "an unknown dashboard file: 404")
st, _ = d.req("POST", "/dashboard")
check(st == 405, "POST /dashboard: 405")
c = __import__("http.client").client.HTTPConnection("127.0.0.1", d.port, timeout=10)
c.request("GET", "/")
r = c.getresponse()
check(r.status == 302 and r.getheader("Location") == "/dashboard", "/ redirects to /dashboard")
c.close()
st, _ = req("GET", "/v1/timeline")
check(st == 401, "GET /v1/timeline without a token: 401")
st, err = req("GET", "/v1/timeline?window_s=0", admin)
check(st == 422 and err["field"] == "window_s", "window_s out of range: 422 naming it")

# -- three jobs of two tenants, run by worker threads ------------------------------------------
specs = [(ta, job_spec("alpha", t_roll=0.6, t_train=0.4, slo=2.0, iterations=200)),
         (ta, job_spec("beta", t_roll=0.6, t_train=0.4, slo=2.0, iterations=200)),
         (tb, job_spec("gamma", t_roll=0.6, t_train=0.4, slo=2.0, iterations=200))]
jobs = []
for tok, spec in specs:
    st, j = req("POST", "/v1/jobs", tok, spec)
    check(st == 201, f"submit {spec['name']} ({j.get('decision', {}).get('decision')})")
    jobs.append(j)
ids = [j["id"] for j in jobs]
stop = threading.Event()
ran = {i: set() for i in ids}  # (pool, node) pairs each job's leases named
fail_once = {ids[1]}  # beta fails its first train: loomd restarts it


def worker(j):
    try:
        work(j)
    except OSError:
        pass  # loomd is gone: the test is over


def work(j):
    wt = j["worker_token"]
    while not stop.is_set():
        st, info = req("GET", f"/v1/jobs/{j['id']}", wt)
        if st != 200 or info["state"] not in ("queued", "running"):
            return
        ph = info["next_phase"]
        st, lease = req("POST", f"/v1/jobs/{j['id']}/phases/{ph}/acquire?wait=2", wt)
        if st != 200:
            continue
        for n in lease["nodes"]:  # a lone member's rollout is on its training node
            ran[j["id"]].add((lease["pool"], n))
        time.sleep(0.2 if ph == "rollout" else 0.1)
        failed = ph == "train" and j["id"] in fail_once
        if failed:
            fail_once.discard(j["id"])
        req("POST", f"/v1/leases/{lease['lease']}/release", wt,
            {"status": "failed" if failed else "ok"})


threads = [threading.Thread(target=worker, args=(j,), daemon=True) for j in jobs]
for t in threads:
    t.start()
time.sleep(4)

st, _ = req("GET", "/v1/timeline", jobs[0]["worker_token"])
check(st == 403, "a worker token may not read the timeline: 403")
st, tl = req("GET", "/v1/timeline?window_s=60", tb)
check(st == 200 and {lz["job"] for lz in tl["leases"]} == {ids[2]}
      and {e["job"] for e in tl["events"]} == {ids[2]},
      "team-b's timeline: its job's leases and events only")
st, groups = req("GET", "/v1/groups", admin)
check(st == 200 and groups["groups"], "the jobs were placed in groups")
st, beta = req("GET", f"/v1/jobs/{ids[1]}", admin)
check(st == 200 and beta["restarts"] == 1, "beta's failed train was retried (restarts 1)")
check(all(ran[i] for i in ids), "every job ran phases")


# -- the browser ---------------------------------------------------------------------------------
class Dom(html.parser.HTMLParser):
    """Elements with their attributes, and the text of the status line."""

    def __init__(self):
        super().__init__()
        self.els = []

    def handle_starttag(self, tag, attrs):
        self.els.append((tag, dict(attrs)))

    def find(self, tag=None, **want):
        return [a for t, a in self.els if (tag is None or t == tag)
                and all(a.get(k.rstrip("_").replace("_", "-")) == v for k, v in want.items())]


profile = tempfile.mkdtemp(prefix="loom-dash-chromium-")


def chromium(url, *extra, budget=4000):
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-dev-shm-usage", "--user-data-dir=" + profile, "--hide-scrollbars",
           f"--virtual-time-budget={budget}"] + list(extra) + [url]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    if p.returncode != 0:
        print(p.stderr[-2000:], file=sys.stderr)
    check(p.returncode == 0, "chromium ran")
    return p.stdout


def dom(tok, server=None):
    base = (server or d).url()
    text = chromium(f"{base}/dashboard" + (f"#token={tok}" if tok else ""), "--dump-dom")
    parsed = Dom()
    parsed.feed(text)
    return parsed, text


st, groups = req("GET", "/v1/groups", admin)  # as the page will find them
page, text = dom(admin)
body = page.find("body")[0]
check(int(body.get("data-polls", "0")) >= 1, f"the page polled loomd ({body.get('data-polls')} "
      "times) with the admin token")
for g in groups["groups"]:
    check(page.find("tr", data_group=str(g["id"])), f"group {g['id']} is shown")
    for m, r in zip(g["members"], g["rates"]):
        check(page.find("span", class_="member", data_job=str(m), data_rate=str(r)),
              f"group {g['id']} lists member {m} with r={r}")
bars = page.find("rect")
for i in ids:
    mine = [b for b in bars if b.get("data-job") == str(i) and "bar" in b.get("class", "")]
    check(mine, f"job {i} has Gantt bars ({len(mine)})")
    shown = {(b["data-pool"], int(b["data-node"])) for b in mine}
    check(ran[i] <= shown, f"job {i}: a bar on every node its leases named {sorted(ran[i])}")
check(any(b.get("data-state") == "failed" and b.get("data-job") == str(ids[1]) for b in bars),
      "beta's failed train lease is drawn as failed")
for i in ids:
    check(page.find("tr", data_job=str(i)), f"job {i} has a row in the jobs table")
check(any(a.get("data-kind") == "readmit" and a.get("data-job") == str(ids[1])
          for a in page.find("li")), "beta's restart is in the event list")
check(page.find("form", id="login") and "hidden" in page.find("form", id="login")[0],
      "no token form with a valid token")
check("alpha #" in text and "gamma #" in text, "jobs are named")
tenants = {a["data-tenant"] for a in page.find("tr") if "data-tenant" in a}
check({"team-a", "team-b", ""} <= tenants, f"admin: every tenant's quota row and the default ({tenants})")

page, text = dom(ta)
rows = {a["data-job"] for a in page.find("tr") if "data-job" in a}
check(rows == {str(ids[0]), str(ids[1])}, f"team-a's token: its two jobs only ({rows})")
tenants = {a["data-tenant"] for a in page.find("tr") if "data-tenant" in a}
check(tenants == {"team-a"}, f"team-a's token: its own quota row only ({tenants})")
check(not any(b.get("data-job") == str(ids[2]) for b in page.find("rect")),
      "team-a's Gantt has no bar of team-b's job")
check(page.find("tr", data_group=str(jobs[0]["decision"]["group"])),
      "team-a still sees its jobs' group (from its jobs)")

page, text = dom(None)
check("hidden" not in page.find("form", id="login")[0] and not page.find("tr", data_job=str(ids[0])),
      "no token: the token form, and no data")

# -- a loomd without tokens: the page just works ------------------------------------------------
open_d = Loomd(build, "--quiet", "--insecure-loopback", "--lease-timeout", "60").start()
st, oj = open_d.req("POST", "/v1/jobs", body=job_spec("open", iterations=1))
check(st == 201, "a job on a loomd without tokens")
page, text = dom(None, open_d)
check("hidden" in page.find("form", id="login")[0], "--insecure-loopback: no token asked")
check(page.find("tr", data_job=str(oj["id"])), "--insecure-loopback: the job is shown")
check(page.find("tr", data_group=str(oj["decision"]["group"])),
      "--insecure-loopback: its group is shown")
check(open_d.stop() == 0, "that loomd stops cleanly")

shot = os.path.join(build, "dashboard.png")
chromium(f"{d.url()}/dashboard?window=30#token={admin}", "--screenshot=" + shot,
         "--window-size=1280,1060")
check(os.path.getsize(shot) > 10000, f"screenshot saved: {shot}")

stop.set()
for i in ids:
    req("DELETE", f"/v1/jobs/{i}", admin)
for t in threads:
    t.join(timeout=10)
shutil.rmtree(profile, True)
check(d.stop() == 0, "loomd stops cleanly")
