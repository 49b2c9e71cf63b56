/*
 * ctl.c - what an operator asks of a running loomd, gathered from its routes (loom/client.h):
 * every page of the job and group lists, the nodes the groups hold, one job with its leases,
 * events, SLO headroom and cost, and a follower of the event log. `loom jobs`, `loom job`,
 * `loom events --watch` print these; the gathering lives here so that any client (and the
 * tests) get the same answers as the command line.
 *
 * Everything comes from routes loomd already scopes to the caller: a tenant's pages hold its
 * own jobs, its timeline its own leases and events, so nothing here filters for security.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "loom/client.h"

/* GET path as a JSON object: 0 and *out, or the client's error (LOOM_EPROTO for a reply that
 * is not a JSON object). */
static int get_json(loom_client *c, const char *path, json_t **out)
{
        char *body = NULL;
        *out = NULL;
        int rc = loom_client_request(c, "GET", path, NULL, NULL, &body);
        if (!rc) {
                json_error_t je;
                *out = json_loads(body ? body : "", 0, &je);
                if (!json_is_object(*out)) {
                        json_decref(*out);
                        *out = NULL;
                        rc = LOOM_EPROTO;
                }
        }
        loom_client_free_string(body);
        return rc;
}

static int dump(json_t *o, char **reply)
{
        *reply = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        return *reply ? 0 : LOOM_ENOMEM;
}

/* Append every item of the pages of `base` (a list route) under key to all. */
static int walk_pages(loom_client *c, const char *base, const char *key, json_t *all)
{
        char path[512];
        json_int_t after = -1;
        for (;;) {
                char sep = strchr(base, '?') ? '&' : '?';
                if (after < 0)
                        snprintf(path, sizeof path, "%s%climit=1000", base, sep);
                else
                        snprintf(path, sizeof path, "%s%climit=1000&after=%lld", base, sep,
                                 (long long)after);
                json_t *page;
                int rc = get_json(c, path, &page);
                if (rc)
                        return rc;
                json_t *items = json_object_get(page, key), *next = json_object_get(page, "next");
                if (!json_is_array(items) || json_array_extend(all, items)) {
                        json_decref(page);
                        return LOOM_EPROTO;
                }
                after = json_is_integer(next) ? json_integer_value(next) : -1;
                json_decref(page);
                if (after < 0)
                        return 0;
        }
}

static bool keep_job(const loom_client_job_filter *f, json_t *j)
{
        if (!f)
                return true;
        const char *t = json_string_value(json_object_get(j, "tenant"));
        if (f->tenant && strcmp(f->tenant, t ? t : ""))
                return false;
        json_t *g = json_object_get(j, "group");
        if (f->has_group && f->group >= 0 &&
            (!json_is_integer(g) || json_integer_value(g) != f->group))
                return false;
        return true;
}

int loom_client_jobs(loom_client *c, const loom_client_job_filter *f, char **reply)
{
        char base[96];
        *reply = NULL;
        snprintf(base, sizeof base, "/v1/jobs?state=%s", f && f->state ? f->state : "any");
        json_t *all = json_array(), *kept = json_array();
        int rc = all && kept ? walk_pages(c, base, "jobs", all) : LOOM_ENOMEM;
        size_t i;
        json_t *j;
        json_array_foreach(all, i, j) if (keep_job(f, j)) json_array_append(kept, j);
        json_decref(all);
        if (rc) {
                json_decref(kept);
                return rc;
        }
        return dump(json_pack("{s:o}", "jobs", kept), reply);
}

int loom_client_groups(loom_client *c, char **reply)
{
        *reply = NULL;
        json_t *all = json_array();
        int rc = all ? walk_pages(c, "/v1/groups", "groups", all) : LOOM_ENOMEM;
        if (rc) {
                json_decref(all);
                return rc;
        }
        return dump(json_pack("{s:o}", "groups", all), reply);
}

/* The node (id, pool) in nodes, added if new; NULL when out of memory. */
static json_t *node_at(json_t *nodes, json_int_t id, const char *pool)
{
        size_t i;
        json_t *n;
        json_array_foreach(nodes, i, n)
        {
                if (json_integer_value(json_object_get(n, "id")) == id &&
                    !strcmp(json_string_value(json_object_get(n, "pool")), pool))
                        return n;
        }
        n = json_pack("{s:I,s:s,s:[],s:[]}", "id", id, "pool", pool, "groups", "jobs");
        if (n && json_array_append_new(nodes, n))
                return NULL;
        return n;
}

static void add_unique(json_t *arr, json_t *v)
{
        size_t i;
        json_t *x;
        json_array_foreach(arr, i, x) if (json_equal(x, v)) return;
        json_array_append(arr, v);
}

/* Every node in o's rollout_nodes and train_nodes gets o's group (g) and jobs (jobs). */
static int add_nodes(json_t *nodes, json_t *o, json_t *g, json_t *jobs)
{
        static const char *const keys[2] = {"rollout_nodes", "train_nodes"};
        static const char *const pools[2] = {"rollout", "train"};
        for (int p = 0; p < 2; p++) {
                size_t i, k;
                json_t *id, *jb;
                json_array_foreach(json_object_get(o, keys[p]), i, id)
                {
                        json_t *n = node_at(nodes, json_integer_value(id), pools[p]);
                        if (!n)
                                return LOOM_ENOMEM;
                        if (json_is_integer(g))
                                add_unique(json_object_get(n, "groups"), g);
                        json_array_foreach(jobs, k, jb) add_unique(json_object_get(n, "jobs"), jb);
                }
        }
        return 0;
}

static int cmp_nodes(const void *a, const void *b)
{
        json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
        int p = strcmp(json_string_value(json_object_get(x, "pool")),
                       json_string_value(json_object_get(y, "pool")));
        if (p)
                return p;
        json_int_t i = json_integer_value(json_object_get(x, "id"));
        json_int_t j = json_integer_value(json_object_get(y, "id"));
        return (i > j) - (i < j);
}

/* nodes sorted by pool, then id. */
static json_t *sorted(json_t *nodes)
{
        size_t n = json_array_size(nodes);
        json_t **v = calloc(n ? n : 1, sizeof *v), *out = json_array();
        for (size_t i = 0; v && i < n; i++)
                v[i] = json_array_get(nodes, i);
        if (v)
                qsort(v, n, sizeof *v, cmp_nodes);
        for (size_t i = 0; v && out && i < n; i++)
                json_array_append(out, v[i]);
        free(v);
        json_decref(nodes);
        return out;
}

int loom_client_nodes(loom_client *c, char **reply)
{
        *reply = NULL;
        char *body = NULL;
        bool from_groups = true;
        int rc = loom_client_groups(c, &body);
        if (rc == LOOM_EPROTO && loom_client_status(c) == 403) {
                loom_client_job_filter live = {.state = "live"};
                from_groups = false;
                loom_client_free_string(body);
                rc = loom_client_jobs(c, &live, &body);
        }
        if (rc) {
                loom_client_free_string(body);
                return rc;
        }
        json_error_t je;
        json_t *in = json_loads(body, 0, &je), *nodes = json_array();
        loom_client_free_string(body);
        size_t i;
        json_t *o;
        json_array_foreach(json_object_get(in, from_groups ? "groups" : "jobs"), i, o)
        {
                json_t *jobs = from_groups ? json_incref(json_object_get(o, "members"))
                                           : json_pack("[O]", json_object_get(o, "id"));
                json_t *g = json_object_get(o, from_groups ? "id" : "group");
                if (!rc)
                        rc = nodes ? add_nodes(nodes, o, g, jobs) : LOOM_ENOMEM;
                json_decref(jobs);
        }
        json_decref(in);
        if (rc) {
                json_decref(nodes);
                return rc;
        }
        return dump(json_pack("{s:o,s:s}", "nodes", sorted(nodes), "source",
                              from_groups ? "groups" : "jobs"),
                    reply);
}

/* ---- one job -------------------------------------------------------------------------------- */

static double wall_us(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (double)ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Mean iteration time from the starts of the job's successive rollouts in the timeline (a
 * multi-rate member's mean includes its short gaps, as its SLO does); < 0 with fewer than two. */
static double mean_iteration(json_t *leases, json_int_t id)
{
        double first = 0, last = 0;
        int n = 0;
        size_t i;
        json_t *l;
        json_array_foreach(leases, i, l)
        {
                const char *ph = json_string_value(json_object_get(l, "phase"));
                const char *st = json_string_value(json_object_get(l, "state"));
                if (json_integer_value(json_object_get(l, "job")) != id || !ph ||
                    strcmp(ph, "rollout") || (st && !strcmp(st, "lost")))
                        continue;
                double t = (double)json_integer_value(json_object_get(l, "granted_us"));
                if (!n || t < first)
                        first = t;
                if (!n || t > last)
                        last = t;
                n++;
        }
        return n < 2 ? -1 : (last - first) / (n - 1) / 1e6;
}

/* The timeline's leases and events of the job, and its SLO with the headroom. */
static void add_timeline(json_t *job, json_t *tl, json_int_t id)
{
        json_t *leases = json_array(), *events = json_array();
        size_t i;
        json_t *x;
        json_array_foreach(json_object_get(tl, "leases"), i, x)
        {
                if (json_integer_value(json_object_get(x, "job")) == id &&
                    json_array_size(leases) < 10)
                        json_array_append(leases, x);
        }
        json_array_foreach(json_object_get(tl, "events"), i, x)
        {
                if (json_integer_value(json_object_get(x, "job")) == id)
                        json_array_insert(events, 0, x); /* newest first there */
        }
        json_object_set_new(job, "leases", leases);
        json_object_set_new(job, "events", events);
        json_array_foreach(json_object_get(tl, "jobs"), i, x)
        {
                if (json_integer_value(json_object_get(x, "id")) != id)
                        continue;
                double budget = json_number_value(json_object_get(x, "budget_s"));
                double it = mean_iteration(json_object_get(tl, "leases"), id);
                json_t *slo =
                    json_pack("{s:O,s:f}", "slo", json_object_get(x, "slo"), "budget_s", budget);
                json_object_set_new(slo, "mean_iteration_s", it < 0 ? json_null() : json_real(it));
                if (json_is_number(json_object_get(x, "slo_effective")))
                        json_object_set(slo, "slo_effective", json_object_get(x, "slo_effective"));
                json_object_set_new(slo, "headroom",
                                    it < 0 || budget <= 0 ? json_null()
                                                          : json_real(1 - it / budget));
                json_object_set_new(job, "slo", slo);
        }
}

/* Its GPUs at the cluster's list prices, and that rate over its life so far. */
static void add_cost(json_t *job, json_t *cluster)
{
        json_t *spec = json_object_get(job, "spec"), *cl = json_object_get(cluster, "cluster");
        double price[2] = {
            json_number_value(
                json_object_get(json_object_get(cl, "rollout_gpu"), "price_per_hour")),
            json_number_value(json_object_get(json_object_get(cl, "train_gpu"), "price_per_hour"))};
        double per_hour =
            (double)json_integer_value(json_object_get(spec, "rollout_gpus")) * price[0] +
            (double)json_integer_value(json_object_get(spec, "train_gpus")) * price[1];
        json_t *from = json_object_get(job, "submitted_us"), *to = json_object_get(job, "ended_us");
        if (!spec || !cl || !json_is_integer(from))
                return;
        double end = json_is_integer(to) ? (double)json_integer_value(to) : wall_us();
        double hours = (end - (double)json_integer_value(from)) / 3.6e9;
        json_object_set_new(job, "cost",
                            json_pack("{s:f,s:f}", "per_hour", per_hour, "so_far",
                                      per_hour * (hours > 0 ? hours : 0)));
}

int loom_client_job_report(loom_client *c, uint32_t job, char **reply)
{
        char path[64];
        json_t *j, *tl, *cl;
        *reply = NULL;
        snprintf(path, sizeof path, "/v1/jobs/%u", job);
        int rc = get_json(c, path, &j);
        if (rc)
                return rc;
        /* The rest is context: a worker token may not read the timeline, and the job is still
         * worth showing without it. */
        if (!get_json(c, "/v1/timeline?window_s=3600", &tl))
                add_timeline(j, tl, job);
        if (!get_json(c, "/v1/cluster", &cl) && !json_object_get(j, "cost"))
                add_cost(j, cl);
        json_decref(tl);
        json_decref(cl);
        return dump(j, reply);
}

/* ---- following the event log ---------------------------------------------------------------- */

struct loom_client_events {
        loom_client *c;
        uint32_t job;
        double window_s;  /* of the next poll */
        double last_poll; /* wall microseconds */
        json_t *seen;     /* key -> at_us of the events returned, within the last window */
};

loom_client_events *loom_client_events_new(loom_client *c, uint32_t job, double since_s)
{
        loom_client_events *w = calloc(1, sizeof *w);
        if (!w || !(w->seen = json_object())) {
                free(w);
                return NULL;
        }
        w->c = c;
        w->job = job;
        w->window_s = since_s > 3600 ? 3600 : since_s > 0 ? since_s : 1;
        return w;
}

void loom_client_events_free(loom_client_events *w)
{
        if (!w)
                return;
        json_decref(w->seen);
        free(w);
}

/* What tells one event from another: loomd's sequence number where the caller sees it (admin),
 * else the whole event (a tenant's carry no sequence). */
static char *event_key(json_t *e)
{
        json_t *seq = json_object_get(e, "seq");
        if (json_is_integer(seq)) {
                char buf[32];
                snprintf(buf, sizeof buf, "#%lld", (long long)json_integer_value(seq));
                return strdup(buf);
        }
        return json_dumps(e, JSON_COMPACT | JSON_SORT_KEYS);
}

int loom_client_events_poll(loom_client_events *w, char **reply)
{
        char path[64];
        json_t *tl;
        *reply = NULL;
        double now = wall_us();
        snprintf(path, sizeof path, "/v1/timeline?window_s=%.3f", w->window_s);
        int rc = get_json(w->c, path, &tl);
        if (rc)
                return rc;
        json_t *fresh = json_array();
        /* loomd's clock, not ours: what the next window can return is decided by its clock */
        double server_now = (double)json_integer_value(json_object_get(tl, "now_us"));
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(tl, "events"), i, e)
        {
                if (w->job && json_integer_value(json_object_get(e, "job")) != w->job)
                        continue;
                char *k = event_key(e);
                if (k && !json_object_get(w->seen, k)) {
                        json_object_set(w->seen, k, json_object_get(e, "at_us"));
                        json_array_insert(fresh, 0, e); /* newest first there */
                }
                free(k);
        }
        json_decref(tl);
        /* Forget what the next window cannot return again; look back twice the time between
         * polls (at least 10 s), so an event committed just before a poll is not missed. */
        if (w->last_poll > 0) {
                double next = (now - w->last_poll) / 1e6 * 2;
                w->window_s = next < 10 ? 10 : next > 3600 ? 3600 : next;
        }
        w->last_poll = now;
        const char *k;
        json_t *v, *tmp;
        json_object_foreach_safe(w->seen, tmp, k, v)
        {
                if (server_now > 0 &&
                    (double)json_integer_value(v) < server_now - 2 * w->window_s * 1e6 - 60e6)
                        json_object_del(w->seen, k);
        }
        return dump(json_pack("{s:o}", "events", fresh), reply);
}
