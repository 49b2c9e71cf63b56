"""The dashboard in a real browser (docs/dashboard.md).

A loomd with tokens runs three small jobs of two tenants: workers (threads here, speaking the
HTTP API with their worker tokens) run their phases for real, and one of them releases a phase
as failed once, so loomd restarts it. Headless Chromium then loads /dashboard and its DOM is
read back after the page has polled: with the admin token (given as #token=) it must show the
group and its members with their rates, Gantt bars of every job on the nodes the leases name,
the jobs table and the restart in the event list; with a tenant token only that tenant's jobs;
with no token, the token form and no data.

Then, driven over the DevTools protocol (dashboard_cdp.py) so that layout can be measured: cost
per job and per tenant as the API computes it from the GPUs and the cluster's prices; a refused
submit in the events (and not in another tenant's timeline); a legend whose rollout and training
shades are the chart's; the jobs card counting the table's rows; a cancelled job showing no group
(its group is gone); the time axis starting near the first lease while loomd is younger than the
window; the Groups table inside an 800 px window; and, on a loomd with the local executor and a
node map, the map's node names on the chart's rows and in the Groups table. A screenshot of
every view is saved as BUILD/dashboard-VIEW.png, the whole page as BUILD/dashboard.png.

Expected values come from the API itself (GET /v1/groups, /v1/jobs) and from what the workers
did, not from the page's code. Exits 77 (skipped) when no Chromium is installed."""

import html.parser
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loomd_harness import Loomd, check, job_spec  # noqa: E402
from dashboard_cdp import Cdp  # noqa: E402

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
# refused: a working set larger than a node's host memory (placement rejects it)
st, out = req("POST", "/v1/jobs", ta, job_spec("omega", mem_rollout_gb=5000))
check(st == 422 and out["field"] == "mem_rollout_gb", f"omega is refused: 422 ({out.get('error')})")
# delta cannot share (SLO 1.0): a group of its own, gone once delta is cancelled
st, delta = req("POST", "/v1/jobs", tb, job_spec("delta", t_roll=30, slo=1.0, iterations=5))
check(st == 201, "delta admitted")
delta_group = delta["decision"]["group"]
st, _ = req("DELETE", f"/v1/jobs/{delta['id']}", tb)
check(st == 200, "delta cancelled")
st, groups = req("GET", "/v1/groups", admin)
check(delta_group not in [g["id"] for g in groups["groups"]],
      f"delta's group {delta_group} no longer exists")
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
      and {e["job"] for e in tl["events"]} == {ids[2], delta["id"]},
      "team-b's timeline: its jobs' leases and events only")
check(tl["rejections"] == [], "team-b's timeline: not team-a's refused submit")
st, tl = req("GET", "/v1/timeline?window_s=60", ta)
check(st == 200 and [(x["name"], x["tenant"], x["status"], x["field"]) for x in tl["rejections"]]
      == [("omega", "team-a", 422, "mem_rollout_gb")], "team-a's timeline: its refused submit")
st, cl = req("GET", "/v1/cluster", tb)
check(st == 200 and [t["tenant"] for t in cl["cost_by_tenant"]] == ["team-b"],
      "team-b's cost by tenant: its own row only")
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

# -- measured in the browser (DevTools protocol) -----------------------------------------------
ROWS = """(() => Object.fromEntries([...document.querySelectorAll('#jobs tbody tr[data-job]')]
  .map((tr) => [tr.dataset.job, { state: tr.dataset.state,
    group: tr.querySelector('td.group').textContent,
    groupTitle: tr.querySelector('td.group').getAttribute('title'),
    perHour: tr.querySelector('td[data-per-hour]').dataset.perHour,
    soFar: tr.querySelector('td[data-so-far]').dataset.soFar }])))()"""
cdp = Cdp(browser, profile, 1280, 1060)
try:
    cdp.load(f"{d.url()}/dashboard#token={admin}")  # the default window: 10 min
    rows = cdp.js(ROWS)
    st, cl = req("GET", "/v1/cluster", admin)
    price = [cl["cluster"]["rollout_gpu"]["price_per_hour"],
             cl["cluster"]["train_gpu"]["price_per_hour"]]
    api = {}
    for i in ids + [delta["id"]]:
        st, j = req("GET", f"/v1/jobs/{i}", admin)
        api[i] = j
        want = j["spec"]["rollout_gpus"] * price[0] + j["spec"]["train_gpus"] * price[1]
        r = rows[str(i)]
        check(abs(j["cost"]["per_hour"] - want) < 1e-6 and abs(float(r["perHour"]) - want) < 1e-3,
              f"job {i}: $/h {r['perHour']} is its GPUs at list price ({want:.2f})")
        hours = ((j["ended_us"] or time.time() * 1e6) - j["submitted_us"]) / 3.6e9
        check(0 < float(r["soFar"]) <= j["cost"]["so_far"] + 1e-9
              and abs(j["cost"]["so_far"] - want * hours) < want * 2 / 3600,
              f"job {i}: spent ${float(r['soFar']):.4f} so far (API, later: "
              f"${j['cost']['so_far']:.4f})")
    costs = cdp.js("Object.fromEntries([...document.querySelectorAll('#costs tr[data-cost-tenant]')]"
                   ".map((tr) => [tr.dataset.costTenant, [+tr.dataset.perHour, +tr.dataset.soFar,"
                   " +tr.children[1].textContent]]))")
    for tenant, members in (("team-a", ids[:2]), ("team-b", [ids[2], delta["id"]])):
        per_hour = sum(api[i]["cost"]["per_hour"] for i in members if api[i]["state"] == "running")
        so_far = sum(api[i]["cost"]["so_far"] for i in members)
        ph, sf, n = costs[tenant]
        check(abs(ph - per_hour) < 1e-3 and 0 < sf <= so_far + 1e-9 and n == len(members),
              f"{tenant}: {n} jobs, ${ph:.2f}/h of its live ones, ${sf:.4f} spent so far")
    check(rows[str(delta["id"])]["state"] == "cancelled" and rows[str(delta["id"])]["group"] == "–"
          and rows[str(delta["id"])]["groupTitle"] == f"ran in group {delta_group}",
          f"cancelled delta shows no group (its group {delta_group} is gone)")
    card = cdp.js("[document.querySelector('#jobs-count .v').textContent,"
                  " document.querySelector('#jobs-count .k').textContent]")
    n_live = sum(r["state"] in ("queued", "running") for r in rows.values())
    check(card == [str(len(rows)), f"jobs ({n_live} live)"] and len(rows) == 4,
          f"the jobs card counts the table's {len(rows)} rows, {n_live} live ({card})")
    ev = cdp.js("[...document.querySelectorAll('#events li[data-kind=rejected]')]"
                ".map((li) => li.textContent)")
    check(len(ev) == 1 and "omega (team-a)" in ev[0] and "mem_rollout_gb" in ev[0]
          and "host memory" in ev[0], f"omega's refusal is in the events ({ev})")
    shades = cdp.js("""(() => { const op = (sel) => [...document.querySelectorAll(sel)]
      .map((e) => getComputedStyle(e).opacity);
      return { keys: [...document.querySelectorAll('#shades [data-shade]')]
                 .map((e) => e.dataset.shade),
               legend: [op('#shades [data-shade=rollout] rect')[0],
                        op('#shades [data-shade=train] rect')[0]],
               chart: [[...new Set(op('#gantt rect.bar.rollout'))],
                       [...new Set(op('#gantt rect.bar.train'))]] }; })()""")
    check({"rollout", "train", "permit", "failed", "migrate"} <= set(shades["keys"]),
          f"the chart's legend names its shades ({shades['keys']})")
    check(shades["chart"] == [[shades["legend"][0]], [shades["legend"][1]]]
          and shades["legend"][0] != shades["legend"][1],
          f"rollout and training bars are shaded as the legend shows ({shades})")
    ax = cdp.js("""(() => { const s = document.querySelector('#gantt svg');
      const xs = [...s.querySelectorAll('rect.bar')].map((r) => +r.getAttribute('x'));
      return [+s.dataset.plotLeft, +s.dataset.plotRight, Math.min(...xs), +s.dataset.spanS]; })()""")
    left, right, first, span = ax
    check((first - left) / (right - left) < 0.25 and span < 600,
          f"10 min window, loomd younger: the axis spans {span} s and the first bar starts at "
          f"{100 * (first - left) / (right - left):.0f} % of the chart")
    views = ["cluster", "costs", "quotas", "groups", "gantt", "jobs", "events"]
    for v in views:
        path = os.path.join(build, f"dashboard-{v}.png")
        check(cdp.shot(f"#{v}-view", path) > 2000, f"screenshot of the {v} view: {path}")
    cdp.size(800, 1000)
    cdp.load(f"{d.url()}/dashboard#token={admin}")
    fit = cdp.js("""(() => { const t = document.querySelector('#groups'),
      v = document.querySelector('#groups-view');
      return [t.getBoundingClientRect().right, v.getBoundingClientRect().right,
              document.documentElement.clientWidth, t.querySelectorAll('tr[data-group]').length];
      })()""")
    check(fit[3] >= 1 and fit[0] <= fit[1] and fit[1] <= fit[2] == 800,
          f"800 px window: the Groups table ends at {fit[0]:.0f} px, inside its view ({fit[1]:.0f})")
    path = os.path.join(build, "dashboard-groups-800.png")
    check(cdp.shot("#groups-view", path) > 2000, f"screenshot of the Groups view at 800 px: {path}")
finally:
    cdp.close()

# -- the executor's node names ------------------------------------------------------------------
exec_dir = tempfile.mkdtemp(prefix="loom-dash-exec-")
node_map = os.path.join(exec_dir, "nodes.json")
with open(node_map, "w") as f:
    json.dump({"rollout": {"partition": "rollout", "nodes": ["n17000r1", "n17000r2"]},
               "train": {"partition": "train", "nodes": ["n17000t1", "n17000t2"]}}, f)
worker = f"exec python3 {source}/tests/integration/exec_worker.py 0.05"
ex = Loomd(build, "--quiet", "--insecure-loopback", "--executor", "local", "--exec-nodes",
           node_map, "--worker", worker, "--exec-dir", exec_dir).start()
for name in ("one", "two"):  # two members: the group holds a rollout node too
    st, _ = ex.req("POST", "/v1/jobs", body={"name": name, "rollout_gpus": 8, "train_gpus": 8,
                                             "t_roll_s": 0.4, "t_train_s": 0.2, "slo": 2.0,
                                             "iterations": 1000})
    check(st == 201, f"job {name} on a loomd with the local executor")
names = {}
for _ in range(100):
    st, tl = ex.req("GET", "/v1/timeline")
    names = tl["node_names"]
    if names["rollout"] and names["train"] and tl["leases"]:
        break
    time.sleep(0.1)
check(set(names["rollout"].values()) <= {"n17000r1", "n17000r2"} and names["rollout"]
      and set(names["train"].values()) <= {"n17000t1", "n17000t2"} and names["train"],
      f"/v1/timeline names the nodes as the node map does ({names})")
cdp = Cdp(browser, profile, 1280, 1060)
try:
    cdp.load(f"{ex.url()}/dashboard?window=30")
    labels = cdp.js("[...document.querySelectorAll('#gantt text.node-label')]"
                    ".map((t) => [t.dataset.pool, t.dataset.node, t.textContent])")
    check(labels and all(t == names[p][n] for p, n, t in labels),
          f"the chart's rows carry the executor's node names ({labels})")
    cells = cdp.js("[...document.querySelectorAll('#groups td.nodes')].map((t) => t.textContent)")
    shown = {n for c in cells for n in c.split(", ")}
    check(shown and shown <= set(names["rollout"].values()) | set(names["train"].values()),
          f"the Groups table names the nodes as the executor does ({cells})")
    path = os.path.join(build, "dashboard-gantt-nodes.png")
    check(cdp.shot("#gantt-view", path) > 2000, f"screenshot of the chart's node names: {path}")
finally:
    cdp.close()
check(ex.stop() == 0, "the loomd with the executor stops cleanly")
shutil.rmtree(exec_dir, True)

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
