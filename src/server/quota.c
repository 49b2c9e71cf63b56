/*
 * quota.c - quotas per tenant (docs/operations.md, "Quotas"): the limits from the "quotas"
 * object of loomd's cluster file, what each tenant's live jobs use against them, and the check
 * a submit passes before anything else happens to it.
 *
 * What a job uses is what it asks for, known before placement: 1 job, its rollout and training
 * GPUs (and the nodes they fill, rounded up per job), and those GPUs at the cluster's prices in
 * US$/h. That is the price of the job run alone; co-location makes the cluster cheaper, but a
 * tenant's usage must not move when other tenants' jobs join or leave its groups, so the
 * nominal price is the one charged. A job uses its share from its submit until it finishes,
 * fails or is cancelled.
 *
 * Usage is kept per tenant, not recounted per submit (a tenant may have thousands of jobs):
 * srv_job_add counts a live job in, srv_quota_drop counts it out when it ends. The job table is
 * only ever refilled from job 1 (start, or a rebuild after a store failure), so adding job 1
 * starts the counts afresh. The scheduler thread owns all of it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/spec.h"
#include "srv.h"

/* ---- configuration ------------------------------------------------------------------------ */

const loom_quota *loom_quota_for(const loom_quota_cfg *q, const char *tenant)
{
        for (int i = 0; i < q->n; i++)
                if (!strcmp(q->tenant[i].tenant, tenant ? tenant : ""))
                        return &q->tenant[i];
        return &q->def;
}

typedef struct qctx {
        const char *text;
        size_t len;
        loom_err *e;
} qctx;

static int qerr(qctx *c, const char *path, const char *fmt, const char *a)
{
        int line = 0, col = 0;
        if (c->text)
                loom_json_locate(c->text, c->len, path, &line, &col);
        loom_err_set(c->e, LOOM_EINVAL, path, fmt, path, a);
        c->e->line = line;
        c->e->col = col;
        return LOOM_EINVAL;
}

/* One limit: a non-negative integer (or a number for cost), or null to lift it. */
static int limit(qctx *c, json_t *v, const char *path, bool integer, unsigned bit, unsigned *set,
                 double *out)
{
        if (json_is_null(v)) {
                *set &= ~bit;
                return 0;
        }
        if (integer ? !json_is_integer(v) : !json_is_number(v))
                return qerr(c, path, "%s: must be %s or null",
                            integer ? "an integer >= 0" : "a number >= 0");
        double x = json_number_value(v);
        if (!(x >= 0) || !isfinite(x) || x > 1e15)
                return qerr(c, path, "%s: must be %s or null",
                            integer ? "an integer >= 0" : "a number >= 0");
        *out = x;
        *set |= bit;
        return 0;
}

static int pools(qctx *c, json_t *o, const char *path, unsigned bits0, unsigned *set,
                 int64_t out[2])
{
        char p[160];
        if (!json_is_object(o))
                return qerr(c, path, "%s: must be an object {\"rollout\": N, \"train\": N}%s", "");
        const char *k;
        json_t *v;
        json_object_foreach(o, k, v)
        {
                snprintf(p, sizeof p, "%s.%s", path, k);
                int pool = !strcmp(k, "rollout") ? 0 : !strcmp(k, "train") ? 1 : -1;
                if (pool < 0)
                        return qerr(c, p, "%s: unknown pool '%s' (rollout or train)", k);
                double x = 0;
                if (limit(c, v, p, true, bits0 << pool, set, &x))
                        return LOOM_EINVAL;
                out[pool] = (int64_t)x;
        }
        return 0;
}

static int entry(qctx *c, json_t *o, const char *path, loom_quota *q)
{
        char p[160];
        if (!json_is_object(o))
                return qerr(c, path, "%s: must be an object%s", "");
        const char *k;
        json_t *v;
        json_object_foreach(o, k, v)
        {
                snprintf(p, sizeof p, "%s.%s", path, k);
                double x = 0;
                int rc;
                if (!strcmp(k, "jobs")) {
                        rc = limit(c, v, p, true, LOOM_QUOTA_JOBS, &q->set, &x);
                        q->jobs = (int64_t)x;
                } else if (!strcmp(k, "cost_per_hour")) {
                        rc = limit(c, v, p, false, LOOM_QUOTA_COST, &q->set, &x);
                        q->cost_per_hour = x;
                } else if (!strcmp(k, "gpus")) {
                        rc = pools(c, v, p, LOOM_QUOTA_GPUS_ROLLOUT, &q->set, q->gpus);
                } else if (!strcmp(k, "nodes")) {
                        rc = pools(c, v, p, LOOM_QUOTA_NODES_ROLLOUT, &q->set, q->nodes);
                } else {
                        rc = qerr(c, p, "%s: unknown field '%s' (jobs, gpus, nodes, cost_per_hour)",
                                  k);
                }
                if (rc)
                        return rc;
        }
        return 0;
}

int loom_quota_cfg_from_json(json_t *obj, const char *where, const char *text, size_t len,
                             loom_quota_cfg *out, loom_err *e)
{
        qctx c = {text, len, e};
        char p[160];
        if (!json_is_object(obj))
                return qerr(&c, where, "%s: must be an object {\"default\": .., \"tenants\": ..}%s",
                            "");
        loom_quota_cfg *q = calloc(1, sizeof *q); /* decoded aside, kept only if valid */
        if (!q)
                return loom_err_set(e, LOOM_ENOMEM, where, "out of memory");
        int rc = 0;
        const char *k;
        json_t *v;
        json_object_foreach(obj, k, v)
        {
                snprintf(p, sizeof p, "%s.%s", where, k);
                if (strcmp(k, "default") && strcmp(k, "tenants")) {
                        rc = qerr(&c, p, "%s: unknown field '%s' (default, tenants)", k);
                        break;
                }
        }
        json_t *def = json_object_get(obj, "default"), *ten = json_object_get(obj, "tenants");
        snprintf(p, sizeof p, "%s.default", where);
        if (!rc && def)
                rc = entry(&c, def, p, &q->def);
        snprintf(p, sizeof p, "%s.tenants", where);
        if (!rc && ten && !json_is_object(ten))
                rc = qerr(&c, p, "%s: must be an object {\"TENANT\": {..}}%s", "");
        json_object_foreach(ten, k, v)
        {
                if (rc)
                        break;
                snprintf(p, sizeof p, "%s.tenants.%s", where, k);
                loom_err te;
                if (loom_tenant_check(k, &te)) {
                        rc = qerr(&c, p, "%s: not a tenant name: %s", te.msg);
                } else if (q->n >= LOOM_QUOTA_TENANTS) {
                        rc = qerr(&c, p, "%s: more than %s tenants", "256");
                } else {
                        loom_quota *t = &q->tenant[q->n++];
                        *t = q->def; /* what the entry does not say, the default says */
                        snprintf(t->tenant, sizeof t->tenant, "%s", k);
                        rc = entry(&c, v, p, t);
                }
        }
        if (!rc)
                *out = *q;
        free(q);
        return rc;
}

/* ---- usage -------------------------------------------------------------------------------- */

typedef struct use {
        char tenant[LOOM_TENANT_MAX];
        int64_t jobs, gpus[2], nodes[2];
        double cost;
        uint64_t refused[6]; /* by quota, in the order of quota_names */
} use;

struct srv_quota {
        use *t;
        size_t n, cap;
};

static const char *const quota_names[] = {"jobs",          "gpus_rollout", "gpus_train",
                                          "nodes_rollout", "nodes_train",  "cost_per_hour"};

/* What one job asks for, in the units of use. */
static use job_use(const loom_server *s, const srv_job *j)
{
        const loom_cluster_cfg *c = &s->cfg.cluster;
        int per = c->gpus_per_node > 0 ? c->gpus_per_node : 1;
        int g[2] = {j->spec.rollout_gpus, j->spec.train_gpus};
        use u = {.jobs = 1};
        for (int p = 0; p < 2; p++) {
                u.gpus[p] = g[p];
                u.nodes[p] = (g[p] + per - 1) / per;
                u.cost += g[p] * c->gpu[p].price_per_hour;
        }
        return u;
}

static use *find(loom_server *s, const char *tenant, bool add)
{
        struct srv_quota *q = s->quota;
        for (size_t i = 0; q && i < q->n; i++)
                if (!strcmp(q->t[i].tenant, tenant))
                        return &q->t[i];
        if (!add)
                return NULL;
        if (!q && !(q = s->quota = calloc(1, sizeof *q)))
                return NULL;
        if (loom_reserve(&q->t, &q->cap, q->n + 1, sizeof *q->t, 8))
                return NULL;
        use *u = &q->t[q->n++];
        memset(u, 0, sizeof *u);
        snprintf(u->tenant, sizeof u->tenant, "%s", tenant);
        return u;
}

static void account(loom_server *s, const srv_job *j, int sign)
{
        if (s->replay_collect) /* compaction's shadow server admits nothing */
                return;
        use *u = find(s, j->tenant, true);
        if (!u)
                return; /* out of memory: the counts are off until the next rebuild */
        use d = job_use(s, j);
        u->jobs += sign * d.jobs;
        u->cost += sign * d.cost;
        for (int p = 0; p < 2; p++) {
                u->gpus[p] += sign * d.gpus[p];
                u->nodes[p] += sign * d.nodes[p];
        }
        if (u->jobs <= 0) { /* no float residue once the last job is out */
                u->jobs = 0;
                u->cost = 0;
        }
}

void srv_quota_added(loom_server *s, const srv_job *j)
{
        if (j->id == 1 && s->quota) /* the table is refilled: count afresh (refusals stay) */
                for (size_t i = 0; i < s->quota->n; i++) {
                        use *u = &s->quota->t[i];
                        u->jobs = u->gpus[0] = u->gpus[1] = u->nodes[0] = u->nodes[1] = 0;
                        u->cost = 0;
                }
        if (srv_job_live(j->state))
                account(s, j, +1);
}

void srv_quota_drop(loom_server *s, const srv_job *j)
{
        account(s, j, -1);
}

void srv_quota_free(loom_server *s)
{
        if (s->quota)
                free(s->quota->t);
        free(s->quota);
        s->quota = NULL;
}

/* ---- admission ---------------------------------------------------------------------------- */

/* used + asked against limit, as the reply and the error name them. */
typedef struct check {
        int which; /* index into quota_names */
        double used, asked, limit;
} check;

static int first_over(const loom_quota *q, const use *u, const use *d, check *out)
{
        static const use zero;
        if (!u)
                u = &zero;
        const struct {
                unsigned bit;
                double used, asked, limit;
        } c[6] = {
            {LOOM_QUOTA_JOBS, (double)u->jobs, (double)d->jobs, (double)q->jobs},
            {LOOM_QUOTA_GPUS_ROLLOUT, (double)u->gpus[0], (double)d->gpus[0], (double)q->gpus[0]},
            {LOOM_QUOTA_GPUS_TRAIN, (double)u->gpus[1], (double)d->gpus[1], (double)q->gpus[1]},
            {LOOM_QUOTA_NODES_ROLLOUT, (double)u->nodes[0], (double)d->nodes[0],
             (double)q->nodes[0]},
            {LOOM_QUOTA_NODES_TRAIN, (double)u->nodes[1], (double)d->nodes[1], (double)q->nodes[1]},
            {LOOM_QUOTA_COST, u->cost, d->cost, q->cost_per_hour},
        };
        for (int i = 0; i < 6; i++)
                if ((q->set & c[i].bit) && c[i].used + c[i].asked > c[i].limit + 1e-9) {
                        *out = (check){i, c[i].used, c[i].asked, c[i].limit};
                        return 1;
                }
        return 0;
}

static json_t *count_json(double v)
{
        return json_integer((json_int_t)v);
}

bool srv_quota_admit(loom_server *s, srv_req *r, const loom_job_spec *spec, const char *tenant)
{
        const loom_quota *q = loom_quota_for(&s->cfg.quotas, tenant);
        if (!q->set)
                return true;
        srv_job probe = {.spec = *spec};
        use d = job_use(s, &probe);
        use *u = find(s, tenant, false);
        check c;
        if (!first_over(q, u, &d, &c))
                return true;
        use *ru = find(s, tenant, true); /* memory only: a refusal writes nothing */
        /* a dry run is a question, not a refused submit */
        if (ru && !r->dry_run)
                ru->refused[c.which]++;
        /* 403: this job alone is over the limit and never fits; 429: it fits once some of the
         * tenant's own jobs end. */
        bool never = c.asked > c.limit + 1e-9;
        const char *name = quota_names[c.which];
        char msg[300];
        const char *who = tenant[0] ? tenant : "(no token)";
        if (c.which == 5)
                snprintf(msg, sizeof msg,
                         "quota exceeded: tenant '%s' cost_per_hour %.2f/%.2f US$/h in use, this "
                         "job asks %.2f more%s",
                         who, c.used, c.limit, c.asked,
                         never ? "; it can never fit" : "; retry once some of your jobs end");
        else
                snprintf(msg, sizeof msg,
                         "quota exceeded: tenant '%s' %s %.0f/%.0f in use, this job asks %.0f "
                         "more%s",
                         who, name, c.used, c.limit, c.asked,
                         never ? "; it can never fit" : "; retry once some of your jobs end");
        /* counts as integers, dollars as numbers */
        json_t *(*num)(double) = c.which == 5 ? json_real : count_json;
        json_t *o = json_pack("{s:s,s:s,s:{s:s,s:s,s:o,s:o,s:o}}", "error", msg, "field", "quota",
                              "quota", "name", name, "tenant", tenant, "used", num(c.used), "limit",
                              num(c.limit), "asked", num(c.asked));
        srv_reply_json(r, never ? 403 : 429, o);
        return false;
}

/* ---- views -------------------------------------------------------------------------------- */

static json_t *pools_json(int64_t rollout, int64_t train)
{
        return json_pack("{s:I,s:I}", "rollout", (json_int_t)rollout, "train", (json_int_t)train);
}

static json_t *limit_json(const loom_quota *q, unsigned bit, double v)
{
        if (!(q->set & bit))
                return json_null();
        return bit == LOOM_QUOTA_COST ? json_real(v) : json_integer((json_int_t)v);
}

static json_t *limits_json(const loom_quota *q)
{
        json_t *g = json_object(), *n = json_object();
        json_object_set_new(g, "rollout",
                            limit_json(q, LOOM_QUOTA_GPUS_ROLLOUT, (double)q->gpus[0]));
        json_object_set_new(g, "train", limit_json(q, LOOM_QUOTA_GPUS_TRAIN, (double)q->gpus[1]));
        json_object_set_new(n, "rollout",
                            limit_json(q, LOOM_QUOTA_NODES_ROLLOUT, (double)q->nodes[0]));
        json_object_set_new(n, "train", limit_json(q, LOOM_QUOTA_NODES_TRAIN, (double)q->nodes[1]));
        json_t *o = json_object();
        json_object_set_new(o, "jobs",
                            (q->set & LOOM_QUOTA_JOBS) ? json_integer(q->jobs) : json_null());
        json_object_set_new(o, "gpus", g);
        json_object_set_new(o, "nodes", n);
        json_object_set_new(o, "cost_per_hour", limit_json(q, LOOM_QUOTA_COST, q->cost_per_hour));
        return o;
}

static json_t *tenant_json(loom_server *s, const char *tenant)
{
        static const use zero;
        const use *u = find(s, tenant, false);
        if (!u)
                u = &zero;
        json_t *refused = json_object();
        for (int i = 0; i < 6; i++)
                if (u->refused[i])
                        json_object_set_new(refused, quota_names[i],
                                            json_integer((json_int_t)u->refused[i]));
        return json_pack("{s:s,s:{s:I,s:o,s:o,s:f},s:o,s:o}", "tenant", tenant, "used", "jobs",
                         (json_int_t)u->jobs, "gpus", pools_json(u->gpus[0], u->gpus[1]), "nodes",
                         pools_json(u->nodes[0], u->nodes[1]), "cost_per_hour", u->cost, "limits",
                         limits_json(loom_quota_for(&s->cfg.quotas, tenant)), "refused", refused);
}

json_t *srv_quota_json(loom_server *s, const srv_req *r)
{
        if (r->who.role != LOOM_ROLE_ADMIN)
                return tenant_json(s, r->who.tenant);
        /* every tenant with jobs, refusals or an entry of its own, then the default */
        json_t *a = json_array();
        const loom_quota_cfg *q = &s->cfg.quotas;
        for (size_t i = 0; s->quota && i < s->quota->n; i++)
                json_array_append_new(a, tenant_json(s, s->quota->t[i].tenant));
        for (int i = 0; i < q->n; i++)
                if (!find(s, q->tenant[i].tenant, false))
                        json_array_append_new(a, tenant_json(s, q->tenant[i].tenant));
        return json_pack("{s:o,s:o}", "default", limits_json(&q->def), "tenants", a);
}

/* Prometheus text: usage, limits and refusals by tenant (labels tenant, pool, quota). */
void srv_quota_metrics(loom_server *s, void (*put)(void *b, const char *fmt, ...), void *b)
{
        const struct srv_quota *q = s->quota;
        size_t n = q ? q->n : 0;
        put(b, "# HELP loom_tenant_jobs Live (queued or running) jobs by tenant.\n"
               "# TYPE loom_tenant_jobs gauge\n");
        for (size_t i = 0; i < n; i++)
                put(b, "loom_tenant_jobs{tenant=\"%s\"} %lld\n", q->t[i].tenant,
                    (long long)q->t[i].jobs);
        put(b, "# HELP loom_tenant_gpus GPUs the live jobs of a tenant ask for, by pool.\n"
               "# TYPE loom_tenant_gpus gauge\n");
        for (size_t i = 0; i < n; i++)
                for (int p = 0; p < 2; p++)
                        put(b, "loom_tenant_gpus{tenant=\"%s\",pool=\"%s\"} %lld\n", q->t[i].tenant,
                            loom_pool_name((loom_pool)p), (long long)q->t[i].gpus[p]);
        put(b, "# HELP loom_tenant_cost_per_hour US$/h of the GPUs the live jobs of a tenant ask "
               "for, at list price.\n# TYPE loom_tenant_cost_per_hour gauge\n");
        for (size_t i = 0; i < n; i++)
                put(b, "loom_tenant_cost_per_hour{tenant=\"%s\"} %.4f\n", q->t[i].tenant,
                    q->t[i].cost);
        put(b, "# HELP loom_tenant_quota_limit A tenant's limit by quota (absent: none).\n"
               "# TYPE loom_tenant_quota_limit gauge\n");
        for (size_t i = 0; i < n; i++) {
                const loom_quota *l = loom_quota_for(&s->cfg.quotas, q->t[i].tenant);
                const double v[6] = {(double)l->jobs,     (double)l->gpus[0],  (double)l->gpus[1],
                                     (double)l->nodes[0], (double)l->nodes[1], l->cost_per_hour};
                for (int k = 0; k < 6; k++)
                        if (l->set & (1u << k))
                                put(b, "loom_tenant_quota_limit{tenant=\"%s\",quota=\"%s\"} %g\n",
                                    q->t[i].tenant, quota_names[k], v[k]);
        }
        put(b, "# HELP loom_quota_refusals_total Submits refused by a quota, by tenant and "
               "quota.\n# TYPE loom_quota_refusals_total counter\n");
        for (size_t i = 0; i < n; i++)
                for (int k = 0; k < 6; k++)
                        if (q->t[i].refused[k])
                                put(b,
                                    "loom_quota_refusals_total{tenant=\"%s\",quota=\"%s\"} %llu\n",
                                    q->t[i].tenant, quota_names[k],
                                    (unsigned long long)q->t[i].refused[k]);
}
