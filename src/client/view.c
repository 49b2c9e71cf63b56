/*
 * view.c - loomd's replies as tables for people (loom_client_render in loom/client.h): the
 * `loom jobs`, `loom job`, `loom groups`, ... output. Scripts read `-o json` instead, so these
 * columns may change; each table is a header row and one row per item, columns padded to the
 * widest cell, a missing value shown as "-".
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "loom/client.h"

#define MAX_COLS 12
#define CELL 96

typedef struct table {
        int cols;
        size_t rows, cap;
        char (*cell)[MAX_COLS][CELL];
} table;

static int row(table *t, ...)
{
        if (t->rows == t->cap) {
                size_t cap = t->cap ? t->cap * 2 : 16;
                void *p = realloc(t->cell, cap * sizeof *t->cell);
                if (!p)
                        return LOOM_ENOMEM;
                t->cell = p;
                t->cap = cap;
        }
        va_list ap;
        va_start(ap, t);
        for (int i = 0; i < t->cols; i++) {
                const char *s = va_arg(ap, const char *);
                snprintf(t->cell[t->rows][i], CELL, "%s", s && *s ? s : "-");
        }
        va_end(ap);
        t->rows++;
        return 0;
}

static void print_table(table *t, FILE *out)
{
        int w[MAX_COLS] = {0};
        for (size_t r = 0; r < t->rows; r++)
                for (int i = 0; i < t->cols; i++) {
                        int n = (int)strlen(t->cell[r][i]);
                        w[i] = n > w[i] ? n : w[i];
                }
        for (size_t r = 0; r < t->rows; r++) {
                for (int i = 0; i < t->cols; i++)
                        if (i == t->cols - 1)
                                fprintf(out, "%s\n", t->cell[r][i]);
                        else
                                fprintf(out, "%-*s  ", w[i], t->cell[r][i]);
        }
        free(t->cell);
        t->cell = NULL;
        t->rows = t->cap = 0;
}

/* A value as text: strings as they are, numbers briefly, arrays joined with commas. */
static const char *text(json_t *v, char *buf, size_t n)
{
        buf[0] = '\0';
        if (json_is_string(v))
                snprintf(buf, n, "%s", json_string_value(v));
        else if (json_is_integer(v))
                snprintf(buf, n, "%lld", (long long)json_integer_value(v));
        else if (json_is_real(v))
                snprintf(buf, n, "%.4g", json_real_value(v));
        else if (json_is_boolean(v))
                snprintf(buf, n, "%s", json_is_true(v) ? "yes" : "no");
        else if (json_is_array(v)) {
                size_t i, len = 0;
                json_t *x;
                char one[32];
                json_array_foreach(v, i, x)
                {
                        if (len + 1 >= n)
                                break;
                        len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? "," : "",
                                                text(x, one, sizeof one));
                }
        }
        return buf;
}

#define T(o, k, b) text(json_object_get(o, k), b, sizeof b)

/* A string member, or dflt when it is absent or not a string (replies are not trusted). */
static const char *str(json_t *o, const char *k, const char *dflt)
{
        const char *s = json_string_value(json_object_get(o, k));
        return s ? s : dflt;
}

/* A wall time (microseconds since the epoch) as UTC "YYYY-MM-DD HH:MM:SS". */
static const char *when(json_t *us, char *buf, size_t n)
{
        buf[0] = '\0';
        if (!json_is_integer(us))
                return buf;
        time_t t = (time_t)(json_integer_value(us) / 1000000);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm);
        return buf;
}

static int jobs_view(json_t *o, FILE *out)
{
        json_t *jobs = json_object_get(o, "jobs");
        if (!json_is_array(jobs))
                return LOOM_EINVAL;
        table t = {.cols = 10};
        int rc = row(&t, "ID", "NAME", "TENANT", "STATE", "ITER", "PHASE", "GROUP", "RATE",
                     "RESTARTS", "NODES r/t");
        size_t i;
        json_t *j;
        json_array_foreach(jobs, i, j)
        {
                char id[24], name[72], ten[40], st[16], it[48], ph[32], g[24], r[16], rs[32],
                    nd[CELL], a[CELL / 2], b[CELL / 2];
                char done[24], of[24];
                T(j, "iterations_done", done);
                json_int_t target = json_integer_value(json_object_get(j, "iterations"));
                snprintf(of, sizeof of, "%lld", (long long)target);
                snprintf(it, sizeof it, "%s/%s", done, target ? of : "inf");
                if (json_is_string(json_object_get(j, "phase")))
                        T(j, "phase", ph);
                else if (json_is_string(json_object_get(j, "next_phase")))
                        snprintf(ph, sizeof ph, "next %s", str(j, "next_phase", "-"));
                else
                        ph[0] = '\0';
                snprintf(rs, sizeof rs, "%lld/%lld",
                         (long long)json_integer_value(json_object_get(j, "restarts")),
                         (long long)json_integer_value(json_object_get(j, "max_restarts")));
                T(j, "rollout_nodes", a);
                T(j, "train_nodes", b);
                snprintf(nd, sizeof nd, "%s/%s", a[0] ? a : "-", b[0] ? b : "-");
                rc = rc ? rc
                        : row(&t, T(j, "id", id), T(j, "name", name), T(j, "tenant", ten),
                              T(j, "state", st), it, ph, T(j, "group", g), T(j, "rate", r), rs, nd);
        }
        if (!rc)
                print_table(&t, out);
        free(t.cell);
        if (!rc && !json_array_size(jobs))
                fprintf(out, "(no jobs)\n");
        return rc;
}

/* A group's nodes: the executor's names (n17000t1) where it has bound every one, else ids. */
static const char *group_nodes(json_t *g, const char *ids, const char *names, char *buf, size_t n)
{
        json_t *nm = json_object_get(g, names), *x;
        bool named = json_array_size(nm) > 0;
        size_t i;
        json_array_foreach(nm, i, x) named = named && json_is_string(x);
        return text(json_object_get(g, named ? names : ids), buf, n);
}

static int groups_view(json_t *o, FILE *out)
{
        json_t *groups = json_object_get(o, "groups");
        if (!json_is_array(groups))
                return LOOM_EINVAL;
        table t = {.cols = 9};
        int rc = row(&t, "GROUP", "MEMBERS", "RATES", "ROLLOUT", "TRAIN", "T_CYCLE_S", "T_META_S",
                     "SATURATED", "US$/H");
        size_t i;
        json_t *g;
        json_array_foreach(groups, i, g)
        {
                char id[24], m[CELL], r[CELL], ro[CELL], tr[CELL], tc[24], tm[24], sat[8], cost[24];
                snprintf(cost, sizeof cost, "%.2f",
                         json_number_value(json_object_get(g, "cost_per_hour")));
                rc = rc ? rc
                        : row(&t, T(g, "id", id), T(g, "members", m), T(g, "rates", r),
                              group_nodes(g, "rollout_nodes", "rollout_node_names", ro, sizeof ro),
                              group_nodes(g, "train_nodes", "train_node_names", tr, sizeof tr),
                              T(g, "t_cycle_s", tc), T(g, "t_meta_s", tm), T(g, "saturated", sat),
                              cost);
        }
        if (!rc)
                print_table(&t, out);
        free(t.cell);
        if (!rc && !json_array_size(groups))
                fprintf(out, "(no groups)\n");
        return rc;
}

static int nodes_view(json_t *o, FILE *out)
{
        json_t *nodes = json_object_get(o, "nodes");
        if (!json_is_array(nodes))
                return LOOM_EINVAL;
        table t = {.cols = 4};
        int rc = row(&t, "NODE", "POOL", "GROUPS", "JOBS");
        size_t i;
        json_t *n;
        json_array_foreach(nodes, i, n)
        {
                char id[24], pool[16], g[CELL], j[CELL];
                rc = rc ? rc
                        : row(&t, T(n, "id", id), T(n, "pool", pool), T(n, "groups", g),
                              T(n, "jobs", j));
        }
        if (!rc)
                print_table(&t, out);
        free(t.cell);
        const char *src = json_string_value(json_object_get(o, "source"));
        if (!rc && !json_array_size(nodes))
                fprintf(out, "(no nodes in use)\n");
        if (!rc && src && !strcmp(src, "jobs"))
                fprintf(out, "(the nodes of your own live jobs; admin tokens see every group's)\n");
        return rc;
}

/* One event as "TIME KIND JOB DETAIL", in fixed columns: a --watch prints a few at a time. */
static void event_line(FILE *out, json_t *e)
{
        char at[32], kind[24], job[24], why[CELL];
        json_t *r = json_object_get(e, "reason");
        if (json_is_object(r)) /* a readmit: {"cause", "why"} */
                snprintf(why, sizeof why, "%s: %s", str(r, "cause", "?"), str(r, "why", ""));
        else if (!strcmp(str(e, "kind", ""), "submit"))
                why[0] = '\0'; /* its reason is loomd's admission number, nothing to act on */
        else
                text(r, why, sizeof why);
        fprintf(out, "%-19s  %-7s  %-10s  %s\n", when(json_object_get(e, "at_us"), at, sizeof at),
                T(e, "kind", kind), T(e, "job", job), why[0] ? why : "-");
}

/* header: the column names first (a --watch prints them once, then view "event-rows"). */
static int events_view(json_t *o, FILE *out, bool header)
{
        json_t *ev = json_object_get(o, "events");
        if (!json_is_array(ev))
                return LOOM_EINVAL;
        if (header)
                fprintf(out, "%-19s  %-7s  %-10s  %s\n", "TIME (UTC)", "EVENT", "JOB", "DETAIL");
        size_t i;
        json_t *e;
        json_array_foreach(ev, i, e) event_line(out, e);
        return 0;
}

static void line(FILE *out, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void line(FILE *out, const char *key, const char *fmt, ...)
{
        va_list ap;
        fprintf(out, "%-14s ", key);
        va_start(ap, fmt);
        vfprintf(out, fmt, ap);
        va_end(ap);
        fputc('\n', out);
}

static void decision_lines(json_t *d, FILE *out)
{
        char g[24], r[CELL], t[CELL];
        const char *kind = json_string_value(json_object_get(d, "decision"));
        if (kind && !strcmp(kind, "rejected")) {
                line(out, "placement", "rejected: %s", str(d, "reason", "no placement"));
                return;
        }
        line(out, "placement", "%s, group %s, rollout nodes %s, train nodes %s",
             str(d, "decision", "-"), T(d, "group", g), T(d, "rollout_nodes", r),
             T(d, "train_nodes", t));
        if (json_object_get(d, "marginal_cost_per_hour"))
                line(out, "", "+US$%.2f/h, T_meta %.3g s, rate %lld",
                     json_number_value(json_object_get(d, "marginal_cost_per_hour")),
                     json_number_value(json_object_get(d, "t_meta_s")),
                     (long long)json_integer_value(json_object_get(d, "rate")));
        if (json_is_number(json_object_get(d, "slo_effective")))
                line(out, "", "SLO relaxed to %.3f (policy.slo_premium)",
                     json_number_value(json_object_get(d, "slo_effective")));
        if (json_is_string(json_object_get(d, "reason")))
                line(out, "", "%s", str(d, "reason", "-"));
}

static int candidates_view(json_t *d, FILE *out)
{
        json_t *cands = json_object_get(d, "candidates");
        if (!json_array_size(cands))
                return 0;
        table t = {.cols = 6};
        int rc = row(&t, "CANDIDATE", "GROUP", "+NODES r/t", "US$/H", "VERDICT", "WHY");
        size_t i;
        json_t *c;
        json_array_foreach(cands, i, c)
        {
                char k[24], g[24], nn[32], cost[24], v[24], why[CELL];
                snprintf(nn, sizeof nn, "%lld/%lld",
                         (long long)json_integer_value(json_object_get(c, "new_rollout_nodes")),
                         (long long)json_integer_value(json_object_get(c, "new_train_nodes")));
                snprintf(cost, sizeof cost, "+%.2f",
                         json_number_value(json_object_get(c, "marginal_cost_per_hour")));
                rc = rc ? rc
                        : row(&t, T(c, "kind", k), T(c, "group", g), nn, cost, T(c, "verdict", v),
                              T(c, "why", why));
        }
        fprintf(out, "\n");
        if (!rc)
                print_table(&t, out);
        free(t.cell);
        json_t *om = json_object_get(d, "candidates_omitted");
        if (!rc && json_integer_value(om) > 0)
                fprintf(out, "(%lld more candidates not listed)\n",
                        (long long)json_integer_value(om));
        return rc;
}

static int decision_view(json_t *o, FILE *out)
{
        json_t *d = json_object_get(o, "decision");
        if (!json_is_object(d))
                return LOOM_EINVAL;
        if (json_is_true(json_object_get(o, "dry_run")))
                fprintf(out, "dry run: nothing was submitted\n");
        else if (json_object_get(o, "id")) {
                char id[24], name[72];
                line(out, "job", "%s (%s), %s", T(o, "id", id), T(o, "name", name),
                     str(o, "state", "-"));
        }
        decision_lines(d, out);
        return candidates_view(d, out);
}

static void spec_lines(json_t *s, FILE *out)
{
        if (!json_is_object(s))
                return;
        line(out, "asks", "%lld rollout GPUs, %lld train GPUs",
             (long long)json_integer_value(json_object_get(s, "rollout_gpus")),
             (long long)json_integer_value(json_object_get(s, "train_gpus")));
        line(out, "phases", "rollout %.4g s, train %.4g s, sync %.4g s (worst case)",
             json_number_value(json_object_get(s, "t_roll_s")),
             json_number_value(json_object_get(s, "t_train_s")),
             json_number_value(json_object_get(s, "sync_s")));
        if (json_number_value(json_object_get(s, "mem_rollout_gb")) > 0 ||
            json_number_value(json_object_get(s, "mem_train_gb")) > 0)
                line(out, "host memory", "rollout %.4g GB, train %.4g GB per node",
                     json_number_value(json_object_get(s, "mem_rollout_gb")),
                     json_number_value(json_object_get(s, "mem_train_gb")));
}

static void progress_lines(json_t *o, FILE *out)
{
        json_int_t target = json_integer_value(json_object_get(o, "iterations"));
        char ph[48] = "", a[CELL], b[CELL], g[24], r[16];
        if (json_is_string(json_object_get(o, "phase")))
                snprintf(ph, sizeof ph, ", in %s (lease %lld)", str(o, "phase", "-"),
                         (long long)json_integer_value(json_object_get(o, "lease")));
        else if (json_is_string(json_object_get(o, "next_phase")))
                snprintf(ph, sizeof ph, ", next %s%s", str(o, "next_phase", "-"),
                         json_is_true(json_object_get(o, "permit")) ? " (permit waiting)" : "");
        if (target)
                line(out, "iterations", "%lld of %lld%s",
                     (long long)json_integer_value(json_object_get(o, "iterations_done")),
                     (long long)target, ph);
        else
                line(out, "iterations", "%lld (runs until cancelled)%s",
                     (long long)json_integer_value(json_object_get(o, "iterations_done")), ph);
        if (json_is_integer(json_object_get(o, "group")))
                line(out, "runs in", "group %s at rate %s, rollout nodes %s, train nodes %s",
                     T(o, "group", g), T(o, "rate", r), T(o, "rollout_nodes", a),
                     T(o, "train_nodes", b));
        line(out, "restarts", "%lld of %lld, re-admissions %lld",
             (long long)json_integer_value(json_object_get(o, "restarts")),
             (long long)json_integer_value(json_object_get(o, "max_restarts")),
             (long long)json_integer_value(json_object_get(o, "resubmits")));
        json_t *ra = json_object_get(o, "readmission");
        if (json_is_object(ra))
                line(out, "last readmit", "%s: %s", str(ra, "cause", "-"), str(ra, "reason", ""));
}

static void observed_lines(json_t *o, FILE *out)
{
        static const char *const phases[2] = {"rollout", "train"};
        for (int p = 0; p < 2; p++) {
                json_t *x = json_object_get(json_object_get(o, "observed"), phases[p]);
                if (!json_is_object(x) || !json_integer_value(json_object_get(x, "samples")))
                        continue;
                char seen[64] = "";
                if (json_object_get(x, "p95_s"))
                        snprintf(seen, sizeof seen, ", p95 %.4g s (%.2fx planned)",
                                 json_number_value(json_object_get(x, "p95_s")),
                                 json_number_value(json_object_get(x, "ratio")));
                line(out, p ? "train" : "rollout", "planned %.4g s, last %.4g s%s over %lld",
                     json_number_value(json_object_get(x, "planned_s")),
                     json_number_value(json_object_get(x, "last_s")), seen,
                     (long long)json_integer_value(json_object_get(x, "samples")));
        }
        json_t *slo = json_object_get(o, "slo");
        if (json_is_object(slo)) {
                json_t *it = json_object_get(slo, "mean_iteration_s");
                json_t *head = json_object_get(slo, "headroom");
                char a[96] = "not measured yet (fewer than two rollouts in the last hour)";
                if (json_is_number(it) && json_is_number(head))
                        snprintf(a, sizeof a, "mean iteration %.4g s: headroom %.0f %%",
                                 json_number_value(it), json_number_value(head) * 100);
                char rel[64] = "";
                if (json_is_number(json_object_get(slo, "slo_effective")))
                        snprintf(rel, sizeof rel, " (relaxed at admission to %.4gx)",
                                 json_number_value(json_object_get(slo, "slo_effective")));
                line(out, "SLO", "%.3gx solo%s, budget %.4g s per iteration; %s",
                     json_number_value(json_object_get(slo, "slo")), rel,
                     json_number_value(json_object_get(slo, "budget_s")), a);
        }
        json_t *cost = json_object_get(o, "cost");
        if (json_is_object(cost))
                line(out, "cost", "US$%.2f so far, US$%.2f/h (its GPUs at list price)",
                     json_number_value(json_object_get(cost, "so_far")),
                     json_number_value(json_object_get(cost, "per_hour")));
}

static int leases_view(json_t *o, FILE *out)
{
        json_t *leases = json_object_get(o, "leases");
        if (!json_array_size(leases))
                return 0;
        table t = {.cols = 6};
        int rc = row(&t, "LEASE", "PHASE", "STATE", "NODES", "GRANTED (UTC)", "HELD_S");
        size_t i;
        json_t *l;
        json_array_foreach(leases, i, l)
        {
                char id[24], ph[16], st[16], nd[CELL], at[32], held[24] = "";
                json_t *g = json_object_get(l, "granted_us"), *e = json_object_get(l, "ended_us");
                if (json_is_integer(g) && json_is_integer(e))
                        snprintf(held, sizeof held, "%.3f",
                                 (double)(json_integer_value(e) - json_integer_value(g)) / 1e6);
                rc = rc ? rc
                        : row(&t, T(l, "lease", id), T(l, "phase", ph), T(l, "state", st),
                              T(l, "nodes", nd), when(g, at, sizeof at), held);
        }
        fprintf(out, "\nrecent leases\n");
        if (!rc)
                print_table(&t, out);
        free(t.cell);
        return rc;
}

static int job_view(json_t *o, FILE *out)
{
        char id[24], name[72], st[16], ten[40], at[32];
        if (!json_object_get(o, "id") || !json_object_get(o, "state"))
                return LOOM_EINVAL;
        line(out, "job", "%s (%s)", T(o, "id", id), T(o, "name", name));
        line(out, "state", "%s", T(o, "state", st));
        if (json_is_string(json_object_get(o, "tenant")))
                line(out, "tenant", "%s", T(o, "tenant", ten));
        if (json_is_integer(json_object_get(o, "submitted_us")))
                line(out, "submitted", "%s UTC",
                     when(json_object_get(o, "submitted_us"), at, sizeof at));
        if (json_is_integer(json_object_get(o, "ended_us")))
                line(out, "ended", "%s UTC", when(json_object_get(o, "ended_us"), at, sizeof at));
        spec_lines(json_object_get(o, "spec"), out);
        progress_lines(o, out);
        observed_lines(o, out);
        if (json_is_object(json_object_get(o, "decision"))) {
                fprintf(out, "\nadmitted with\n");
                decision_lines(json_object_get(o, "decision"), out);
        }
        int rc = leases_view(o, out);
        if (!rc && json_array_size(json_object_get(o, "events"))) {
                fprintf(out, "\nevents\n");
                rc = events_view(o, out, true);
        }
        return rc;
}

static int cluster_view(json_t *o, FILE *out)
{
        json_t *cl = json_object_get(o, "cluster"), *n = json_object_get(o, "nodes");
        if (!json_is_object(cl) || !json_is_object(n))
                return LOOM_EINVAL;
        const char *scope = json_string_value(json_object_get(o, "scope"));
        bool tenant = scope && !strcmp(scope, "tenant");
        json_t *rg = json_object_get(cl, "rollout_gpu"), *tg = json_object_get(cl, "train_gpu");
        line(out, "scope", "%s",
             tenant ? "your tenant's jobs and their groups" : "the whole cluster");
        line(out, "GPUs", "rollout %s (US$%.2f/h), train %s (US$%.2f/h), %lld per node",
             str(rg, "name", "-"), json_number_value(json_object_get(rg, "price_per_hour")),
             str(tg, "name", "-"), json_number_value(json_object_get(tg, "price_per_hour")),
             (long long)json_integer_value(json_object_get(cl, "gpus_per_node")));
        line(out, "jobs", "%lld live in %lld groups",
             (long long)json_integer_value(json_object_get(o, "jobs")),
             (long long)json_integer_value(json_object_get(o, "groups")));
        json_t *bp = json_object_get(o, "cost_per_hour_by_pool");
        line(out, "nodes", "%lld rollout (US$%.2f/h), %lld train (US$%.2f/h)",
             (long long)json_integer_value(json_object_get(n, "rollout")),
             json_number_value(json_object_get(bp, "rollout")),
             (long long)json_integer_value(json_object_get(n, "train")),
             json_number_value(json_object_get(bp, "train")));
        line(out, "cost", "US$%.2f/h provisioned",
             json_number_value(json_object_get(o, "cost_per_hour")));
        json_t *rp = json_object_get(o, "replication");
        if (json_is_object(rp) && json_object_get(rp, "leader"))
                line(out, "store", "%s, replicated; the leader is %s", str(rp, "store", "-"),
                     str(rp, "leader", "-"));
        else if (json_is_object(rp))
                line(out, "store", "%s", str(rp, "store", "-"));
        json_t *p = json_object_get(o, "policy");
        if (json_is_object(p))
                line(out, "policy", "admission %s, dispatch %s, multirate %s, re-plans %lld",
                     str(p, "admission", "-"), str(p, "dispatch", "-"),
                     json_is_true(json_object_get(p, "multirate")) ? "on" : "off",
                     (long long)json_integer_value(json_object_get(o, "replans")));
        json_t *q = json_object_get(o, "quotas");
        json_t *used = json_object_get(q, "used"), *lim = json_object_get(q, "limits");
        if (json_is_object(used)) {
                char l[24], m[24];
                json_t *lj = json_object_get(lim, "jobs"),
                       *lc = json_object_get(lim, "cost_per_hour");
                if (json_is_number(lc))
                        snprintf(m, sizeof m, "US$%.2f/h", json_number_value(lc));
                line(out, "quota", "jobs %lld of %s, US$%.2f/h of %s",
                     (long long)json_integer_value(json_object_get(used, "jobs")),
                     json_is_number(lj) ? text(lj, l, sizeof l) : "no limit",
                     json_number_value(json_object_get(used, "cost_per_hour")),
                     json_is_number(lc) ? m : "no limit");
        } else if (json_is_array(json_object_get(q, "tenants")))
                line(out, "quotas", "%zu tenants with usage, refusals or limits (-o json)",
                     json_array_size(json_object_get(q, "tenants")));
        return 0;
}

int loom_client_render(const char *view, const char *js, FILE *out, char *err, size_t n)
{
        json_error_t je;
        json_t *o = js ? json_loads(js, 0, &je) : NULL;
        int rc = LOOM_EINVAL;
        if (!json_is_object(o))
                rc = LOOM_EINVAL;
        else if (!strcmp(view, "jobs"))
                rc = jobs_view(o, out);
        else if (!strcmp(view, "groups"))
                rc = groups_view(o, out);
        else if (!strcmp(view, "nodes"))
                rc = nodes_view(o, out);
        else if (!strcmp(view, "events") || !strcmp(view, "event-rows"))
                rc = events_view(o, out, !strcmp(view, "events"));
        else if (!strcmp(view, "job"))
                rc = job_view(o, out);
        else if (!strcmp(view, "cluster"))
                rc = cluster_view(o, out);
        else if (!strcmp(view, "decision"))
                rc = decision_view(o, out);
        else {
                snprintf(err, n, "unknown view '%s'", view);
                json_decref(o);
                return LOOM_EINVAL;
        }
        if (rc == LOOM_EINVAL)
                snprintf(err, n, "the reply is not what a '%s' view shows", view);
        json_decref(o);
        return rc;
}
