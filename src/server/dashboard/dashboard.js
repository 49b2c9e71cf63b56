/*
 * loom dashboard: polls loomd's API every 1.5 s and draws the cluster, its groups, a Gantt
 * chart of phases per node, and the jobs. Plain JavaScript, no library.
 *
 * Authentication: the page is public; the data is not. A bearer token given as #token=... in
 * the URL or typed into the form is kept in sessionStorage (this tab only) and sent with every
 * request, so a tenant token shows that tenant's jobs only. Without tokens (loomd
 * --insecure-loopback) no token is asked for.
 */
"use strict";

const POLL_MS = 1500;
const TOKEN_KEY = "loom.token";
const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
                 "#ff9da7", "#9c755f", "#bab0ac"];

const $ = (sel) => document.querySelector(sel);
let timer = null;
let polls = 0;

/* ---- token ----------------------------------------------------------------------------- */

function takeTokenFromUrl() {
  const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (!m) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
  /* keep it out of the address bar, history and screenshots */
  history.replaceState(null, "", location.pathname + location.search);
}

function token() { return sessionStorage.getItem(TOKEN_KEY); }

class HttpError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

async function api(path) {
  const headers = { "Accept": "application/json" };
  const t = token();
  if (t) headers["Authorization"] = "Bearer " + t;
  const r = await fetch(path, { headers, cache: "no-store" });
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (!r.ok) throw new HttpError(r.status, (body && body.error) || r.statusText);
  return body;
}

/* ---- small helpers ----------------------------------------------------------------------- */

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids) if (k !== null && k !== undefined)
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

function svg(tag, attrs, ...kids) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

function fill(parent, nodes, emptyText) {
  parent.replaceChildren(...nodes);
  if (!nodes.length && emptyText) parent.append(el("li", { class: "empty" }, emptyText));
}

const secs = (s) => s === null || s === undefined ? "–" :
  s >= 100 ? s.toFixed(0) + " s" : s >= 10 ? s.toFixed(1) + " s" : s.toFixed(2) + " s";
const money = (x) => "$" + x.toFixed(2);
const clock = (us) => new Date(us / 1000).toLocaleTimeString([], { hour12: false });
const colour = (job) => PALETTE[(job - 1) % PALETTE.length];
const jobLabel = (jobs, id) => {
  const j = jobs.get(id);
  return j ? `${j.name} #${id}` : `#${id}`;
};
/* The executor's name of a node (/v1/timeline's node_names), else loom's id in its pool. */
let nodeNames = { rollout: {}, train: {} };
const nodeName = (pool, n) => (nodeNames[pool] || {})[n] || `${pool} node ${n}`;
const live = (j) => j.state === "queued" || j.state === "running";

/* ---- views ------------------------------------------------------------------------------- */

/* The jobs card counts the rows of the jobs table (every job the caller sees, ended ones too),
 * and says how many of them are live. */
function renderCluster(c, jobs) {
  const card = (k, v, id, cls) => el("div", { class: "card " + (cls || ""), id },
                                     el("div", { class: "v" }, v),
                                el("div", { class: "k" }, k));
  const byPool = c.cost_per_hour_by_pool || {};
  const nLive = jobs.filter(live).length;
  const spent = (c.cost_by_tenant || []).reduce((a, t) => a + t.so_far, 0);
  fill($("#cluster"), [
    card("rollout nodes", c.nodes.rollout, "nodes-rollout"),
    card("training nodes", c.nodes.train, "nodes-train"),
    card("rollout pool $/h", money(byPool.rollout || 0)),
    card("training pool $/h", money(byPool.train || 0)),
    card("provisioned $/h", money(c.cost_per_hour), "cost"),
    card("jobs' GPUs spent so far", money(spent), "cost-spent"),
    card("groups", c.groups),
    card(`jobs (${nLive} live)`, jobs.length, "jobs-count"),
    card("policy", `${c.policy.admission} · ${c.policy.dispatch}` +
         (c.policy.multirate ? " · multirate" : ""), "policy", "wide"),
  ].concat(c.replication && c.replication.store === "etcd"
    /* replicated (docs/ha.md): the replica answering is the leader */
    ? [card("leader (etcd replicas)", c.replication.leader, "leader", "wide")] : []));
}

/* Quotas from /v1/cluster: a tenant's own row, or (admin) every tenant's and the default. A
 * cell is "used / limit", or "used" alone where no limit is set. */
function renderQuotas(q) {
  const rows = q.tenants ? q.tenants : [q];
  const cell = (used, lim, fmt) => {
    const f = fmt || String;
    const over = lim !== null && lim !== undefined && used >= lim;
    return el("td", { class: over ? "bad" : null },
              lim === null || lim === undefined ? f(used) : `${f(used)} / ${f(lim)}`);
  };
  const refused = (r) => Object.entries(r || {}).map(([k, v]) => `${k} ${v}`).join(", ") || "–";
  const trs = rows.map((t) => el("tr", { "data-tenant": t.tenant },
    el("td", {}, t.tenant || "(no token)"),
    cell(t.used.jobs, t.limits.jobs),
    cell(t.used.gpus.rollout, t.limits.gpus.rollout),
    cell(t.used.gpus.train, t.limits.gpus.train),
    cell(t.used.nodes.rollout, t.limits.nodes.rollout),
    cell(t.used.nodes.train, t.limits.nodes.train),
    cell(t.used.cost_per_hour, t.limits.cost_per_hour, money),
    el("td", {}, refused(t.refused))));
  if (q.default) {
    const d = q.default, lim = (v, f) => v === null ? "–" : (f || String)(v);
    trs.push(el("tr", { class: "muted", "data-tenant": "" }, el("td", {}, "default"),
      el("td", {}, lim(d.jobs)), el("td", {}, lim(d.gpus.rollout)), el("td", {}, lim(d.gpus.train)),
      el("td", {}, lim(d.nodes.rollout)), el("td", {}, lim(d.nodes.train)),
      el("td", {}, lim(d.cost_per_hour, money)), el("td", {}, "")));
  }
  const body = $("#quotas tbody");
  body.replaceChildren(...trs);
  if (!trs.length) body.append(el("tr", {}, el("td", { colspan: 8 }, "no tenants")));
}

/* Cost by tenant (/v1/cluster's cost_by_tenant): its live jobs' GPUs per hour, and what all
 * its jobs have cost since their submits, at list price. */
function renderCosts(rows) {
  const trs = (rows || []).map((t) => el("tr", { "data-cost-tenant": t.tenant,
      "data-per-hour": t.per_hour, "data-so-far": t.so_far },
    el("td", {}, t.tenant || "(no token)"),
    el("td", { class: "num" }, t.jobs),
    el("td", { class: "num" }, money(t.per_hour)),
    el("td", { class: "num" }, money(t.so_far))));
  const body = $("#costs tbody");
  body.replaceChildren(...trs);
  if (!trs.length) body.append(el("tr", {}, el("td", { colspan: 4 }, "no jobs")));
}

/* Every page of a list (/v1/jobs, /v1/groups; up to PAGES of 1000), following "next". */
const PAGES = 10;
async function allPages(path, key) {
  let items = [], after = null, more = false;
  for (let i = 0; i < PAGES; i++) {
    const page = await api(path + "?limit=1000" + (after !== null ? "&after=" + after : ""));
    items = items.concat(page[key]);
    after = page.next;
    more = after !== null && after !== undefined;
    if (!more) break;
  }
  return { [key]: items, truncated: more };
}

/* Groups from /v1/groups (admin); a tenant sees the groups of its own jobs, members of other
 * tenants left out. */
function groupsFromJobs(jobs) {
  const g = new Map();
  for (const j of jobs.values()) {
    if (j.group == null || !live(j)) continue;
    if (!g.has(j.group)) g.set(j.group, { id: j.group, members: [], rates: [],
      rollout_nodes: new Set(), train_nodes: j.train_nodes || [] });
    const x = g.get(j.group);
    x.members.push(j.id);
    x.rates.push(j.rate || 1);
    for (const n of j.rollout_nodes || []) x.rollout_nodes.add(n);
  }
  return [...g.values()].map((x) => ({ ...x, rollout_nodes: [...x.rollout_nodes] }));
}

function renderGroups(groups, jobs, partial) {
  $("#groups-note").textContent = partial ?
    "(from your jobs only: other tenants' members are not shown)" : "";
  const rows = groups.map((g) => el("tr", { "data-group": g.id },
    el("td", {}, "group " + g.id),
    el("td", { class: "nodes" }, g.rollout_nodes.map((n) => nodeName("rollout", n)).join(", ")),
    el("td", { class: "nodes" }, g.train_nodes.map((n) => nodeName("train", n)).join(", ")),
    el("td", {}, ...g.members.map((m, i) => el("span", { class: "member", "data-job": m,
        "data-rate": g.rates[i] },
      el("span", { class: "swatch", "data-c": m }), jobLabel(jobs, m),
      el("b", {}, ` r=${g.rates[i]}`)))),
    el("td", { class: "num" }, secs(g.t_meta_s)),
    el("td", { class: "num" }, secs(g.t_cycle_s)),
    el("td", { class: "num" }, secs(g.t_load_s)),
    el("td", {}, g.saturated === undefined ? "–" : g.saturated ? "yes" : "no"),
    el("td", { class: "num" }, g.cost_per_hour === undefined ? "–" : money(g.cost_per_hour))));
  const body = $("#groups tbody");
  body.replaceChildren(...rows);
  if (!rows.length) body.append(el("tr", {}, el("td", { colspan: 9 }, "no groups")));
  for (const s of document.querySelectorAll(".swatch[data-c]"))
    s.style.background = colour(+s.dataset.c);
}

/* Where the time axis starts: the window's start, or, when nothing in the window is older, a
 * little before the oldest lease or permit (at least 10 s before now), so a window that is
 * mostly empty (loomd started a moment ago) does not squeeze the bars into its last sliver. */
function axisStart(tl) {
  const now = tl.now_us, t0 = now - tl.window_s * 1e6;
  let first = now;
  for (const l of tl.leases)
    if (l.ended_us === null || l.ended_us >= t0) first = Math.min(first, l.granted_us);
  for (const p of tl.permits) first = Math.min(first, p.since_us);
  first = Math.min(first, now - 10e6);
  return Math.max(t0, first - 0.05 * (now - first));
}

/* The shades of the chart, drawn as the chart draws them. */
function renderShades() {
  const key = (cls, text, attrs) => el("span", { class: "shade", "data-shade": cls },
    (() => { const k = svg("svg", { width: 22, height: 12, class: "shade-key" });
             k.append(svg("rect", Object.assign({ x: 1, y: 1, width: 20, height: 10, rx: 2 },
                                                attrs)));
             return k; })(), text);
  fill($("#shades"), [
    key("rollout", "rollout (lighter)", { class: "bar rollout", fill: PALETTE[0] }),
    key("train", "training (solid)", { class: "bar train", fill: PALETTE[0] }),
    key("permit", "permit not yet claimed", { class: "permit", stroke: PALETTE[0] }),
    key("failed", "failed, expired or lost", { class: "bar train failed", fill: PALETTE[0] }),
    key("migrate", "tail migrated", { class: "migrate", width: 4 }),
  ]);
}

/* One row per node that ran, or was given, a phase in the window; one bar per lease. */
function renderGantt(tl, jobs) {
  const now = tl.now_us, t0 = axisStart(tl);
  const rows = new Map(); /* "rollout:2" -> {pool, node} */
  /* a lone member's rollout runs on its training node: the lease names the pool */
  const poolOf = (x) => x.pool || (x.phase === "rollout" ? "rollout" : "train");
  const key = (pool, n) => pool + ":" + n;
  const addRow = (pool, n) => { if (!rows.has(key(pool, n)))
    rows.set(key(pool, n), { pool, node: n }); };
  for (const l of tl.leases) for (const n of l.nodes) addRow(poolOf(l), n);
  for (const p of tl.permits) for (const n of p.nodes) addRow(poolOf(p), n);
  const order = [...rows.keys()].sort((a, b) => {
    const [pa, na] = a.split(":"), [pb, nb] = b.split(":");
    return pa === pb ? na - nb : pa === "train" ? -1 : 1;
  });
  const labels = order.map((k) => { const r = rows.get(k); return nodeName(r.pool, r.node); });
  const left = Math.max(110, 12 + 6.5 * Math.max(0, ...labels.map((l) => l.length)));
  const W = Math.max(left + 300, $("#gantt").clientWidth || 1000), right = 14;
  const rowH = 22, top = 18;
  const H = top + order.length * rowH + 4;
  const x = (us) => left + (Math.max(us, t0) - t0) / (now - t0) * (W - left - right);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H,
                            role: "img", "aria-label": "phases per node",
                            "data-plot-left": left, "data-plot-right": W - right,
                            "data-span-s": ((now - t0) / 1e6).toFixed(1) });
  for (let s = 0; s <= 10; s++) { /* time axis: ten ticks */
    const us = t0 + s * (now - t0) / 10, xx = x(us);
    root.append(svg("line", { class: "axis", x1: xx, x2: xx, y1: top - 4, y2: H }));
    const ago = (now - us) / 1e6;
    root.append(svg("text", { x: xx - 14, y: 11 }, ago < 0.5 ? "now" :
      ago < 10 ? `-${ago.toFixed(1)}s` : `-${ago.toFixed(0)}s`));
  }
  order.forEach((k, i) => {
    const r = rows.get(k), y = top + i * rowH;
    root.append(svg("text", { x: 4, y: y + 15, class: "node-label", "data-pool": r.pool,
                              "data-node": r.node }, labels[i]));
    root.append(svg("line", { class: "axis", x1: left, x2: W - right, y1: y + rowH, y2: y + rowH }));
  });
  const rowY = (pool, n) => top + order.indexOf(key(pool, n)) * rowH;
  let bars = 0;
  for (const l of tl.leases) {
    const end = l.ended_us === null ? now : l.ended_us;
    if (end < t0) continue;
    for (const n of l.nodes) {
      const x0 = x(l.granted_us), w = Math.max(1.5, x(end) - x0);
      const b = svg("rect", { class: `bar ${l.phase} ${l.state}`, x: x0, y: rowY(poolOf(l), n) + 3,
        width: w, height: rowH - 6, rx: 2, fill: colour(l.job), "data-job": l.job, "data-pool": poolOf(l),
        "data-node": n, "data-phase": l.phase, "data-state": l.state, "data-lease": l.lease });
      b.append(svg("title", {}, `${jobLabel(jobs, l.job)} ${l.phase} (lease ${l.lease}, ` +
        `${l.state}) ${((end - l.granted_us) / 1e6).toFixed(2)} s on ${l.gpus} GPUs`));
      root.append(b);
      bars++;
      if (l.keep_gpus) root.append(svg("rect", { class: "migrate", x: x(end) - 4,
        y: rowY(poolOf(l), n) + 1, width: 4, height: rowH - 2 },
        svg("title", {}, `tail migrated: keeps ${l.keep_gpus} GPUs`)));
    }
  }
  for (const p of tl.permits) for (const n of p.nodes) {
    const x0 = x(p.since_us);
    root.append(svg("rect", { class: "permit", x: x0, y: rowY(poolOf(p), n) + 3,
      width: Math.max(2, x(now) - x0), height: rowH - 6, stroke: colour(p.job),
      "data-job": p.job }, svg("title", {}, `permit for ${jobLabel(jobs, p.job)} ${p.phase}`)));
  }
  root.append(svg("line", { class: "now", x1: x(now), x2: x(now), y1: top - 4, y2: H }));
  $("#gantt").replaceChildren(order.length ? root :
    el("p", { class: "empty" }, "no phase ran in this window"));
  const win = tl.window_s >= 60 ? tl.window_s / 60 + " min" : tl.window_s + " s";
  const span = (now - t0) / 1e6;
  $("#gantt-note").textContent = `last ${win}` + (span < tl.window_s - 0.5 ?
    ` (nothing before ${secs(span)} ago: the axis starts there)` : "") + ` · ${bars} bars`;
  const seen = [...new Set(tl.leases.map((l) => l.job))].sort((a, b) => a - b);
  fill($("#legend"), seen.map((j) => el("span", {},
    el("span", { class: "swatch", "data-c": j }), jobLabel(jobs, j))));
  for (const s of document.querySelectorAll("#legend .swatch")) s.style.background = colour(+s.dataset.c);
}

function renderLive(tl, jobs) {
  const ago = (us) => ((tl.now_us - us) / 1e6).toFixed(1) + " s";
  fill($("#permits"), tl.permits.map((p) => el("li", { "data-job": p.job },
    `${jobLabel(jobs, p.job)} ${p.phase} on ` +
    `${p.nodes.map((n) => nodeName(p.pool || "train", n)).join(", ")}, waiting ${ago(p.since_us)}`)),
    "none");
  fill($("#waits"), tl.waits.map((w) => el("li", { "data-job": w.job },
    `${jobLabel(jobs, w.job)} asks for ${w.phase}, for ${ago(w.since_us)}`)), "none");
  const m = tl.migrations.map((x) => el("li", { "data-job": x.job },
    `${jobLabel(jobs, x.job)} lease ${x.lease}: tail squeezed onto ${x.keep_gpus} GPUs of ` +
    `${nodeName(x.pool || "rollout", x.nodes[0])}`));
  if (tl.migrations_total !== undefined)
    m.push(el("li", { class: "empty" }, `${tl.migrations_total} since loomd started`));
  fill($("#migrations"), m, "none");
}

/* Mean iteration time from the starts of successive rollouts in the window (a multi-rate
 * member's mean includes its short gaps, as its SLO does). */
function meanIteration(tl, id) {
  const starts = tl.leases.filter((l) => l.job === id && l.phase === "rollout" &&
                                         l.state !== "lost")
    .map((l) => l.granted_us).sort((a, b) => a - b);
  if (starts.length < 2) return null;
  return (starts[starts.length - 1] - starts[0]) / (starts.length - 1) / 1e6;
}

function obsCell(o) {
  if (!o || !o.samples) return el("td", { class: "num" }, "–");
  const seen = o.p95_s !== undefined ? `p95 ${secs(o.p95_s)}` : `last ${secs(o.last_s)}`;
  return el("td", { class: "num" }, `${seen} / ${secs(o.planned_s)}`);
}

function renderJobs(list, tl) {
  const slo = new Map(tl.jobs.map((j) => [j.id, j]));
  const rows = list.map((j) => {
    const o = j.observed || {};
    const drift = ["rollout", "train"].map((p) => o[p] && o[p].ratio !== undefined ?
      `${p[0]} ${o[p].ratio.toFixed(2)}×` : null).filter(Boolean);
    const driftBad = ["rollout", "train"].some((p) => o[p] && o[p].ratio > 1.05);
    const it = meanIteration(tl, j.id), s = slo.get(j.id);
    const budget = s ? s.budget_s : null;
    const head = it !== null && budget ? 1 - it / budget : null;
    const isLive = live(j), cost = j.cost || null;
    const readm = j.readmission ? `${j.resubmits} (last: ${j.readmission.cause})` : `${j.resubmits}`;
    return el("tr", { "data-job": j.id, "data-state": j.state },
      el("td", {}, el("span", { class: "swatch", "data-c": j.id }), `${j.name} #${j.id}`),
      el("td", { class: j.state === "failed" ? "bad" : j.state === "finished" ? "ok" : "" },
         j.state),
      el("td", { class: "num" }, `${j.iterations_done} / ${j.iterations || "∞"}`),
      el("td", {}, j.phase ? `${j.phase} (lease ${j.lease})` :
         j.permit ? `${j.next_phase} permit` : isLive ? `next ${j.next_phase}` : "–"),
      /* an ended job is in no group (its group may be gone) */
      el("td", { class: "group", title: !isLive && j.group != null ? `ran in group ${j.group}` : null },
         isLive && j.group != null ? `${j.group} (r=${j.rate || 1})` : "–"),
      obsCell(o.rollout), obsCell(o.train),
      el("td", { class: driftBad ? "warn" : "" }, drift.length ? drift.join(" ") : "–"),
      el("td", { class: "num" }, `${secs(it)} / ${secs(budget)}`),
      el("td", { class: "num " + (head === null ? "" : head < 0 ? "bad" : "ok"),
                 "data-headroom": head === null ? "" : head.toFixed(3) },
         head === null ? "–" : (head * 100).toFixed(0) + " %"),
      el("td", { class: "num " + (j.restarts ? "warn" : "") }, `${j.restarts} / ${j.max_restarts}`),
      el("td", {}, readm),
      el("td", { class: "num", "data-per-hour": cost ? cost.per_hour : "" },
         cost && isLive ? money(cost.per_hour) : "–"),
      el("td", { class: "num", "data-so-far": cost ? cost.so_far : "" },
         cost ? money(cost.so_far) : "–"));
  });
  const body = $("#jobs tbody");
  body.replaceChildren(...rows);
  if (!rows.length) body.append(el("tr", {}, el("td", { colspan: 14 }, "no jobs")));
  for (const s of document.querySelectorAll("#jobs .swatch")) s.style.background = colour(+s.dataset.c);
}

/* Re-admissions, failures and refused submits first of all; submits and exits for context. */
function renderEvents(tl, jobs) {
  const items = [];
  for (const e of tl.events) {
    let text, cls = "";
    if (e.kind === "readmit") {
      const r = typeof e.reason === "object" && e.reason ? e.reason : {};
      text = `re-admitted (${r.cause || "?"}): ${r.why || ""}`;
      cls = r.cause === "restart" ? "bad" : "warn";
    } else if (e.kind === "exit") {
      text = `left its group: ${e.reason}`;
      cls = e.reason === "failed" ? "bad" : "";
    } else if (e.kind === "submit") {
      text = "admitted";
    } else {
      text = `${e.kind} ${typeof e.reason === "string" ? e.reason : ""}`;
    }
    items.push({ at: e.at_us, job: e.job, kind: e.kind, text, cls });
  }
  for (const x of tl.rejections || [])
    items.push({ at: x.at_us, kind: "rejected", cls: "bad",
                 who: `${x.name || "(no name)"}` + (x.tenant ? ` (${x.tenant})` : ""),
                 text: `submit refused, ${x.status}` + (x.field ? ` on ${x.field}` : "") +
                       `: ${x.error}` });
  for (const l of tl.leases)
    if (l.state === "failed" || l.state === "expired" || l.state === "lost")
      items.push({ at: l.ended_us, job: l.job, kind: "lease-" + l.state, cls: "bad",
                   text: `${l.phase} lease ${l.lease} ${l.state}` });
  items.sort((a, b) => b.at - a.at);
  fill($("#events"), items.slice(0, 200).map((i) => el("li", { "data-kind": i.kind,
      "data-job": i.job },
    el("time", {}, clock(i.at)), el("span", { class: "tag " + i.cls }, i.kind),
    `${i.who || jobLabel(jobs, i.job)}: ${i.text}`)), "no events in this window");
}

/* ---- polling ----------------------------------------------------------------------------- */

function setStatus(text, bad) {
  const s = $("#status");
  s.textContent = text;
  s.className = "status" + (bad ? " bad" : "");
}

function askToken(msg) {
  $("#login").hidden = false;
  $("#login-error").textContent = msg || "";
  setStatus("token required", true);
}

async function poll() {
  const win = $("#window").value;
  try {
    const [cluster, jobs, tl] = await Promise.all([api("/v1/cluster"), allPages("/v1/jobs", "jobs"),
                                                   api("/v1/timeline?window_s=" + win)]);
    const byId = new Map(jobs.jobs.map((j) => [j.id, j]));
    let groups, partial = false;
    try {
      groups = (await allPages("/v1/groups", "groups")).groups;
    } catch (e) {
      if (!(e instanceof HttpError) || e.status !== 403) throw e;
      groups = groupsFromJobs(byId); /* a tenant token: its own jobs' groups */
      partial = true;
    }
    nodeNames = tl.node_names || { rollout: {}, train: {} };
    renderCluster(cluster, jobs.jobs);
    renderCosts(cluster.cost_by_tenant);
    if (cluster.quotas) renderQuotas(cluster.quotas);
    $("#jobs-note").textContent = jobs.truncated ?
      `(the first ${jobs.jobs.length}: more are in GET /v1/jobs)` : "";
    renderGroups(groups, byId, partial);
    renderGantt(tl, byId);
    renderLive(tl, byId);
    renderJobs(jobs.jobs, tl);
    renderEvents(tl, byId);
    $("#login").hidden = true;
    $("#forget").hidden = !token();
    polls++;
    document.body.dataset.polls = polls;
    setStatus(`live · ${clock(tl.now_us)}`, false);
  } catch (e) {
    if (e instanceof HttpError && e.status === 401) {
      if (token()) sessionStorage.removeItem(TOKEN_KEY);
      askToken(e.message);
      return; /* no polling until a token is given */
    }
    setStatus("loomd unreachable: " + e.message, true);
  }
  timer = setTimeout(poll, POLL_MS);
}

function restart() {
  clearTimeout(timer);
  poll();
}

/* ?window=S picks the Gantt window (one of the menu's) */
function windowFromUrl() {
  const w = new URLSearchParams(location.search).get("window");
  const opt = [...$("#window").options].find((o) => o.value === w);
  if (opt) $("#window").value = w;
}

document.addEventListener("DOMContentLoaded", () => {
  takeTokenFromUrl();
  windowFromUrl();
  renderShades();
  $("#login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = $("#token").value.trim();
    if (!t) return;
    sessionStorage.setItem(TOKEN_KEY, t);
    $("#token").value = "";
    restart();
  });
  $("#forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    location.reload();
  });
  $("#window").addEventListener("change", restart);
  window.addEventListener("hashchange", () => { takeTokenFromUrl(); restart(); });
  poll();
});
