/*
 * dashboard.c - loomd's operator dashboard: its static page and the data it polls.
 *
 * The page (src/server/dashboard/: HTML, CSS, plain JavaScript) is compiled into loomd as C
 * arrays by cmake/embed.cmake, so a loomd binary serves it with no files beside it. It is
 * public: GET /dashboard is answered on the HTTP thread before authentication, because it
 * holds no data. Everything it shows comes from the ordinary API with the operator's bearer
 * token: /v1/cluster, /v1/groups (admin), /v1/jobs, and GET /v1/timeline, defined here, which
 * is answered by the scheduler thread and scoped like /v1/jobs (a tenant sees its own jobs).
 *
 * The timeline is what the Gantt chart and the event list need in one reply: the leases of
 * the last window (from the store, so a restart loses none of them), the permits waiting to be
 * claimed, the acquires waiting for a permit, live tail migrations, the log's submits, exits
 * and re-admissions, the submits refused lately (kept in memory by engine.c), and the
 * executor's names of the nodes shown.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "srv.h"

/* Generated at build time from src/server/dashboard/ (cmake/embed.cmake). */
struct srv_asset {
        const char *name;
        const unsigned char *data;
        size_t len;
};
extern const struct srv_asset srv_dashboard_assets[];
extern const size_t srv_dashboard_n_assets;

#define WINDOW_DEFAULT_S 600
#define WINDOW_MAX_S 3600
#define TIMELINE_MAX_ROWS 5000

/* ---- static files (HTTP thread) ------------------------------------------------------------ */

static const char *content_type(const char *name)
{
        static const struct {
                const char *ext, *type;
        } t[] = {{".html", "text/html; charset=utf-8"},
                 {".css", "text/css; charset=utf-8"},
                 {".js", "text/javascript; charset=utf-8"},
                 {".svg", "image/svg+xml"},
                 {".png", "image/png"},
                 {".txt", "text/plain; charset=utf-8"}};
        const char *dot = strrchr(name, '.');
        for (size_t i = 0; dot && i < sizeof t / sizeof t[0]; i++)
                if (!strcmp(dot, t[i].ext))
                        return t[i].type;
        return "application/octet-stream";
}

static const struct srv_asset *find_asset(const char *name)
{
        for (size_t i = 0; i < srv_dashboard_n_assets; i++)
                if (!strcmp(srv_dashboard_assets[i].name, name))
                        return &srv_dashboard_assets[i];
        return NULL;
}

static int queue(struct MHD_Connection *conn, unsigned status, const void *data, size_t len,
                 const char *type, const char *location)
{
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_PERSISTENT);
        if (!resp)
                return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
        /* The page runs only its own script and talks only to this loomd. */
        MHD_add_response_header(resp, "Content-Security-Policy",
                                "default-src 'self'; img-src 'self' data:; "
                                "frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
        if (location)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, location);
        int ret = MHD_queue_response(conn, status, resp);
        MHD_destroy_response(resp);
        return ret;
}

static int queue_text(struct MHD_Connection *conn, unsigned status, const char *text)
{
        return queue(conn, status, text, strlen(text), "text/plain; charset=utf-8", NULL);
}

int srv_dashboard_serve(struct MHD_Connection *conn, const char *method, const char *url)
{
        const char *name = NULL;
        bool root = !strcmp(url, "/");
        if (!strcmp(url, "/dashboard") || !strcmp(url, "/dashboard/"))
                name = "index.html";
        else if (!strncmp(url, "/dashboard/", 11))
                name = url + 11;
        else if (!root)
                return -1;
        if (strcmp(method, "GET") && strcmp(method, "HEAD"))
                return queue_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                                  "method not allowed here (allowed: GET, HEAD)\n");
        if (root)
                return queue(conn, MHD_HTTP_FOUND, "see /dashboard\n", 15,
                             "text/plain; charset=utf-8", "/dashboard");
        const struct srv_asset *a = find_asset(name);
        if (!a)
                return queue_text(conn, MHD_HTTP_NOT_FOUND, "no such dashboard file\n");
        return queue(conn, MHD_HTTP_OK, a->data, a->len, content_type(a->name), NULL);
}

/* ---- GET /v1/timeline (parse on the HTTP thread, answer on the scheduler thread) ------------ */

static const char *query_arg(srv_req *r, const char *key)
{
        if (!r->conn)
                return r->value ? r->value(r, 0, key) : NULL;
        return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

void srv_dashboard_parse(loom_server *s, srv_req *r)
{
        (void)s;
        const char *w = query_arg(r, "window_s");
        double win = WINDOW_DEFAULT_S;
        if (w) {
                char *end;
                errno = 0;
                win = strtod(w, &end);
                if (errno || end == w || *end || !(win > 0) || win > WINDOW_MAX_S)
                        return srv_reply_error(r, 422, "window_s",
                                               "'window_s' must be a number of seconds in "
                                               "(0, %d]",
                                               WINDOW_MAX_S);
        }
        r->window = loom_us_from_s(win);
        r->kind = RQ_TIMELINE;
}

typedef struct timeline {
        loom_server *s;
        srv_req *r;
        json_t *leases, *events;
} timeline;

static json_t *nodes_array(const loom_node_id *n, int count)
{
        json_t *a = json_array();
        for (int i = 0; a && i < count; i++)
                json_array_append_new(a, json_integer(n[i]));
        return a;
}

/* "1,2" as the store keeps a lease's nodes. */
static json_t *nodes_parse(const char *text)
{
        json_t *a = json_array();
        for (const char *p = text; a && *p;) {
                char *end;
                unsigned long v = strtoul(p, &end, 10);
                if (end == p)
                        break;
                json_array_append_new(a, json_integer((json_int_t)v));
                p = *end == ',' ? end + 1 : end;
        }
        return a;
}

static bool visible(const timeline *t, uint32_t id)
{
        const srv_job *j = srv_job_get(t->s, id);
        return j && srv_auth_sees(t->r, j);
}

static void on_lease(void *arg, const srv_lease_row *l)
{
        timeline *t = arg;
        if (!visible(t, l->job))
                return;
        const srv_job *j = srv_job_get(t->s, l->job);
        int keep = j->has_lease && j->lease.id == l->id ? j->lease.keep_gpus : 0;
        json_t *o = json_pack(
            "{s:I,s:I,s:s,s:s,s:s,s:o,s:i,s:I}", "lease", (json_int_t)srv_lease_pub(t->s, l->id),
            "job", (json_int_t)j->pub, "phase", l->phase, "pool", l->pool, "state", l->state,
            "nodes", nodes_parse(l->nodes), "gpus", l->gpus, "granted_us", (json_int_t)l->granted);
        if (!o)
                return;
        json_object_set_new(o, "ended_us", l->ended ? json_integer(l->ended) : json_null());
        if (keep)
                json_object_set_new(o, "keep_gpus", json_integer(keep));
        json_array_append_new(t->leases, o);
}

static void on_log(void *arg, int64_t seq, const char *kind, uint32_t job, const char *reason,
                   int64_t at)
{
        timeline *t = arg;
        if (!visible(t, job))
                return;
        const char *k = kind ? kind : "";
        json_t *o =
            json_pack("{s:I,s:s,s:I,s:I}", "seq", (json_int_t)seq, "kind", k, "job",
                      (json_int_t)srv_job_get(t->s, job)->pub, "at_us", (json_int_t)at);
        if (!o)
                return;
        /* The log's sequence and the core's admission numbers count every tenant's jobs: a
         * tenant sees neither. */
        bool admin = t->r->who.role == LOOM_ROLE_ADMIN;
        if (!admin)
                json_object_del(o, "seq");
        bool plan = !strcmp(k, "regroup");
        if (!admin && (plan || !strcmp(k, "submit")))
                reason = ""; /* a plan names other tenants' jobs */
        /* A re-admission's and a plan's reason is a JSON object (cause, why, ...; plan); the
         * others are words. */
        bool obj = plan || !strcmp(k, "readmit");
        json_t *why = reason && obj ? json_loads(reason, 0, NULL) : NULL;
        if (why && !admin)
                json_object_del(why, "core");
        json_object_set_new(o, "reason", why ? why : json_string(reason ? reason : ""));
        json_array_append_new(t->events, o);
}

/* Permits not yet claimed, acquires waiting, and live tail migrations. */
static void live_state(timeline *t, json_t *permits, json_t *waits, json_t *migr, loom_us now,
                       int64_t wall)
{
        loom_server *s = t->s;
        for (uint32_t i = 0; i < s->n_jobs; i++) {
                const srv_job *j = s->jobs[i];
                if (!srv_auth_sees(t->r, j) || !srv_job_live(j->state))
                        continue;
                if (j->permit)
                        json_array_append_new(
                            permits,
                            json_pack("{s:I,s:s,s:s,s:o,s:i,s:I}", "job", (json_int_t)j->pub,
                                      "phase", loom_phase_name(j->permit_phase), "pool",
                                      loom_pool_name(j->permit_pool), "nodes",
                                      nodes_array(j->permit_nodes, j->permit_n_nodes), "gpus",
                                      j->permit_gpus, "since_us",
                                      (json_int_t)(wall - (now - j->permit_since))));
                if (j->has_lease && j->lease.keep_gpus)
                        json_array_append_new(
                            migr, json_pack("{s:I,s:I,s:o,s:i}", "job", (json_int_t)j->pub, "lease",
                                            (json_int_t)srv_lease_pub(s, j->lease.id), "nodes",
                                            nodes_array(j->lease.nodes, j->lease.n_nodes),
                                            "keep_gpus", j->lease.keep_gpus));
        }
        for (const srv_req *w = s->waiters; w; w = w->wnext) {
                const srv_job *j = srv_job_get(s, w->job);
                if (j && srv_auth_sees(t->r, j))
                        json_array_append_new(
                            waits, json_pack("{s:I,s:s,s:I}", "job", (json_int_t)j->pub, "phase",
                                             loom_phase_name(w->phase), "since_us",
                                             (json_int_t)(wall - (now - w->t_arrival))));
        }
}

/* The SLO of each job shown (the job list leaves the spec out). */
static json_t *job_slos(const timeline *t)
{
        json_t *a = json_array();
        for (uint32_t i = 0; a && i < t->s->n_jobs; i++) {
                const srv_job *j = t->s->jobs[i];
                if (!srv_auth_sees(t->r, j))
                        continue;
                /* the longest mean iteration the SLO allows: slo x the solo iteration, or the
                 * budget measured on the job's learned profile once it is planned on it */
                loom_us budget = j->learned && j->learned_budget > 0 ? j->learned_budget
                                                                     : loom_job_budget(&j->spec);
                /* policy.slo_premium relaxed its SLO at admission: held to that until learned */
                double eff = json_number_value(json_object_get(j->decision, "slo_effective"));
                if (eff > 0 && !(j->learned && j->learned_budget > 0))
                        budget = (loom_us)((double)budget / j->spec.slo * eff);
                json_t *o = json_pack("{s:I,s:f,s:f,s:f}", "id", (json_int_t)j->pub, "slo",
                                      j->spec.slo, "sync_s", loom_us_to_s(j->spec.t_sync),
                                      "budget_s", loom_us_to_s(budget));
                if (o && eff > 0)
                        json_object_set_new(o, "slo_effective", json_real(eff));
                json_array_append_new(a, o);
        }
        return a;
}

/* names[pool][id] = the executor's name of the node, where it knows one. */
static void name_node(loom_server *s, json_t *names, const char *pool, json_int_t id)
{
        loom_pool p = !strcmp(pool, "rollout") ? LOOM_POOL_ROLLOUT : LOOM_POOL_TRAIN;
        const char *name = srv_exec_node_name(s, p, (loom_node_id)id);
        json_t *by = json_object_get(names, loom_pool_name(p));
        char key[24];
        snprintf(key, sizeof key, "%lld", (long long)id);
        if (name && by && !json_object_get(by, key))
                json_object_set_new(by, key, json_string(name));
}

static void name_nodes_of(loom_server *s, json_t *names, json_t *items)
{
        size_t i, k;
        json_t *x, *n;
        json_array_foreach(items, i, x)
        {
                const char *pool = json_string_value(json_object_get(x, "pool"));
                const char *phase = json_string_value(json_object_get(x, "phase"));
                if (!pool) /* a lone member's rollout names its pool; see the leases */
                        pool = phase && !strcmp(phase, "rollout") ? "rollout" : "train";
                json_array_foreach(json_object_get(x, "nodes"), k, n)
                    name_node(s, names, pool, json_integer_value(n));
        }
}

/* "node_names": {"rollout": {"3": "n17000r1"}, "train": {...}}, the executor's names of the
 * nodes this reply shows (leases, permits) and of the caller's live jobs' groups; empty
 * without an executor. */
static json_t *node_names(const timeline *t, json_t *permits)
{
        loom_server *s = t->s;
        json_t *names = json_pack("{s:{},s:{}}", "rollout", "train");
        if (!names || !s->cfg.exec)
                return names;
        name_nodes_of(s, names, t->leases);
        name_nodes_of(s, names, permits);
        for (uint32_t i = 0; i < s->n_jobs; i++) {
                const srv_job *j = s->jobs[i];
                loom_job_info in;
                if (!srv_auth_sees(t->r, j) || !srv_job_live(j->state) ||
                    loom_sched_job_info(s->sched, j->retry.core, &in))
                        continue;
                for (int k = 0; k < in.n_rollout_nodes; k++)
                        name_node(s, names, "rollout", in.rollout_nodes[k]);
                for (int k = 0; k < in.n_train_nodes; k++)
                        name_node(s, names, "train", in.train_nodes[k]);
        }
        return names;
}

/* Submits refused in the window (engine.c keeps the last SRV_REJECTS_MAX), newest last: all of
 * them for an admin, a tenant's own. */
static json_t *rejections(const timeline *t, int64_t since)
{
        loom_server *s = t->s;
        json_t *a = json_array();
        bool admin = t->r->who.role == LOOM_ROLE_ADMIN;
        uint64_t from = s->n_rejects > SRV_REJECTS_MAX ? s->n_rejects - SRV_REJECTS_MAX : 0;
        for (uint64_t i = from; a && i < s->n_rejects; i++) {
                const srv_reject *x = &s->rejects[i % SRV_REJECTS_MAX];
                if (x->at_wall < since || (!admin && strcmp(x->tenant, t->r->who.tenant)))
                        continue;
                json_array_append_new(a, json_pack("{s:I,s:s,s:s,s:i,s:s,s:s}", "at_us",
                                                   (json_int_t)x->at_wall, "tenant", x->tenant,
                                                   "name", x->name, "status", x->status, "field",
                                                   x->field, "error", x->error));
        }
        return a;
}

void srv_h_timeline(loom_server *s, srv_req *r, loom_us now)
{
        int64_t wall = srv_now_wall();
        timeline t = {.s = s, .r = r, .leases = json_array(), .events = json_array()};
        json_t *permits = json_array(), *waits = json_array(), *migr = json_array();
        json_t *o = json_object();
        loom_err e;
        loom_err_clear(&e);
        int rc = t.leases && t.events && permits && waits && migr && o ? 0 : LOOM_ENOMEM;
        if (!rc)
                rc = srv_store_timeline(s->store, wall - r->window, TIMELINE_MAX_ROWS, on_lease,
                                        on_log, &t, &e);
        if (rc) {
                json_decref(t.leases);
                json_decref(t.events);
                json_decref(permits);
                json_decref(waits);
                json_decref(migr);
                json_decref(o);
                if (rc == LOOM_ENOMEM)
                        return srv_reply_error(r, 500, "", "out of memory");
                return srv_reply_loom_err(r, 500, &e); /* a read: the store stays usable */
        }
        live_state(&t, permits, waits, migr, now, wall);
        json_object_set_new(o, "now_us", json_integer(wall));
        json_object_set_new(o, "window_s", json_real(loom_us_to_s(r->window)));
        json_object_set_new(o, "leases", t.leases);
        json_object_set_new(o, "permits", permits);
        json_object_set_new(o, "waits", waits);
        json_object_set_new(o, "migrations", migr);
        json_object_set_new(o, "events", t.events);
        json_object_set_new(o, "rejections", rejections(&t, wall - r->window));
        json_object_set_new(o, "node_names", node_names(&t, permits));
        json_object_set_new(o, "jobs", job_slos(&t));
        if (r->who.role == LOOM_ROLE_ADMIN) /* a cluster-wide count */
                json_object_set_new(o, "migrations_total",
                                    json_integer((json_int_t)s->m.migrations));
        srv_reply_json(r, 200, o);
}
